"""``python -m fairseq_residual.options``: the model options that ``fairseq-train --help`` leaves out, with each
preset's defaults."""

import subprocess
import sys

import pytest
from helpers import PLUGIN_DIR

from fairseq_residual import options
from fairseq_residual.language_model import PRESETS
from fairseq_residual.schemes import SCHEMES


def help_text(capsys, *argv):
    options.main(list(argv))
    return " ".join(capsys.readouterr().out.split())


def test_every_preset_of_both_models_is_listed():
    assert options.ARCHS == [
        "residual_transformer",
        "residual_transformer_iwslt_de_en",
        "residual_transformer_lm",
        *sorted(f"residual_{preset}" for preset in PRESETS),
        "residual_transformer_opus100",
        "residual_transformer_wmt_en_de",
    ]


@pytest.mark.parametrize("arch", ["residual_transformer_lm", *(f"residual_{preset}" for preset in PRESETS)])
def test_a_language_models_options_are_shown_with_its_presets_sizes(capsys, arch):
    """The README's command for the model options works for the language model's architectures too."""
    text = help_text(capsys, "--arch", arch)
    assert f"fairseq-train DATA --task language_modeling --user-dir fairseq_residual --arch {arch}" in text
    assert "--residual-scheme {post,pre,residual," in text and "(default: residual)" in text
    assert "--encoder-layers" not in text  # a decoder-only model
    width = options.arch_defaults(arch)["decoder_embed_dim"]
    assert f"--decoder-embed-dim DECODER_EMBED_DIM decoder embedding dimension (default: {width})" in text
    assert width == {"residual_transformer_lm": 512, "residual_transformer_lm_gpt2_tiny": 64}.get(arch, width)


def test_the_scheme_options_are_shown_with_their_help_and_default(capsys):
    text = help_text(capsys)
    choices = ",".join(SCHEMES)  # every registered scheme, in the registry's order
    assert choices.startswith("post,pre,residual,deepnet,b2t,admin,tfixup,dlcl,sandwich,normformer,residual-sandwich,")
    assert f"--residual-scheme {{{choices}}} how sub-layer outputs" in text
    assert "(default: residual)" in text
    assert "--dual-stream-scale DUAL_STREAM_SCALE ResiDual only:" in text
    assert "--residual-output-alpha RESIDUAL_OUTPUT_ALPHA ResiDual schemes only:" in text
    assert "--hc-streams HC_STREAMS Hyper-Connections (hc, mhc) only:" in text
    assert "--encoder-embed-dim ENCODER_EMBED_DIM embedding dimension (default: 512)" in text


def test_a_presets_defaults_are_the_ones_shown(capsys):
    text = help_text(capsys, "--arch", "residual_transformer_opus100")
    assert "fairseq-train DATA --user-dir fairseq_residual --arch residual_transformer_opus100" in text
    assert "--encoder-layers ENCODER_LAYERS number of layers (default: 18)" in text
    assert "does not depend on s beyond LN's epsilon (default: 0.05)" in text
    assert "(docs/schemes.md) (default: 1.0)" in text  # --residual-output-scale
    assert text.endswith("max-autotune; unset: torch's default) (default: None)")  # --torch-compile-mode, the last
    assert options.arch_defaults("residual_transformer_iwslt_de_en")["encoder_embed_dim"] == 256


def test_the_language_models_input_and_output_dims_are_shown_following_its_width(capsys):
    text = help_text(capsys, "--arch", "residual_transformer_lm")
    assert "--decoder-input-dim DECODER_INPUT_DIM the embedding's width" in text
    assert text.count("(default: --decoder-embed-dim)") == 2


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
