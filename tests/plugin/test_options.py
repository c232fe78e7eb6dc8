"""``python -m fairseq_residual.options``: the model options that ``fairseq-train --help`` leaves out, with each
preset's defaults."""

import subprocess
import sys

import pytest
from helpers import PLUGIN_DIR

from fairseq_residual import options


def help_text(capsys, *argv):
    options.main(list(argv))
    return " ".join(capsys.readouterr().out.split())


def test_every_preset_of_the_model_is_listed():
    assert options.ARCHS == [
        "residual_transformer",
        "residual_transformer_iwslt_de_en",
        "residual_transformer_opus100",
        "residual_transformer_wmt_en_de",
    ]


def test_the_scheme_options_are_shown_with_their_help_and_default(capsys):
    text = help_text(capsys)
    choices = "post,pre,residual,deepnet,b2t,admin,tfixup,dlcl,sandwich,normformer,residual-sandwich,hc,mhc"
    assert f"--residual-scheme {{{choices}}} how sub-layer outputs" in text
    assert "(default: residual)" in text
    assert "--dual-stream-scale DUAL_STREAM_SCALE ResiDual only:" in text
    assert "--hc-streams HC_STREAMS Hyper-Connections (hc, mhc) only:" in text
    assert "--encoder-embed-dim ENCODER_EMBED_DIM embedding dimension (default: 512)" in text


def test_a_presets_defaults_are_the_ones_shown(capsys):
    text = help_text(capsys, "--arch", "residual_transformer_opus100")
    assert "fairseq-train DATA --user-dir fairseq_residual --arch residual_transformer_opus100" in text
    assert "--encoder-layers ENCODER_LAYERS number of layers (default: 18)" in text
    assert "does not depend on s beyond LN's epsilon (default: 0.05)" in text
    assert options.arch_defaults("residual_transformer_iwslt_de_en")["encoder_embed_dim"] == 256


@pytest.mark.slow
def test_fairseq_train_help_omits_the_model_options():
    """Why the module exists: fairseq prints --help before it adds the --arch's options."""
    help_out = subprocess.run(
        [sys.executable, "-m", "fairseq_cli.train", "--user-dir", PLUGIN_DIR, "--arch", "residual_transformer", "-h"],
        capture_output=True,
        text=True,
    ).stdout
    assert "--arch" in help_out and "--max-update" in help_out
    assert "--residual-scheme" not in help_out and "--dual-stream-scale" not in help_out
