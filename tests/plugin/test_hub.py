"""Translating raw text with a trained model: the plugin's load_translator, fairseq's from_pretrained and
the README's fairseq-interactive command, on a checkpoint trained on data-prep output.

The data is the embedded corpus named de/en and prepared by the custom recipe with IWSLT-14's steps
(Moses tokenisation without dash splitting, lowercasing, joint BPE), so the README's IWSLT command runs
on it unchanged.
"""

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, run_cli, train_args

from fairseq_residual.errors import DataError
from fairseq_residual.hub import load_translator
from fairseq_residual.model import ResidualTransformerModel

pytestmark = pytest.mark.slow  # fairseq-train, fairseq-interactive and python processes


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from fairseq_residual_tools.dataprep import custom
    from fairseq_residual_tools.demo.corpus import write_corpus

    root = tmp_path_factory.mktemp("hub")
    raw = write_corpus(root / "raw", seed=1, src="de", tgt="en", train=800, valid=40, test=40)
    out = root / "out"
    custom.main(
        ["--train-prefix", raw["train"], "--valid-prefix", raw["valid"], "--test-prefix", raw["test"]]
        + ["--src", "de", "--tgt", "en", "--lowercase", "--bpe-merges", "400", "--out", str(out), "--quiet"]
    )
    save_dir = root / "checkpoints"
    run_cli(train_args(out / "bin", save_dir, max_update=4), cwd=root)
    raw_test = Path(f"{raw['test']}.de").read_text().splitlines()[:3]
    return out, save_dir / "checkpoint_best.pt", raw_test


def test_data_prep_records_the_steps_raw_text_went_through(trained):
    out, _, _ = trained
    record = json.loads((out / "summary.json").read_text())["translation"]
    assert record["tokenizer"] == "moses" and record["moses_aggressive_dash_splits"] is False
    assert record["lowercase"] is True and record["bpe"] == "subword_nmt"
    assert (out / record["bpe_codes"]).is_file() and (out / record["data_bin"] / "dict.de.txt").is_file()
    assert record["fairseq_interactive_flags"] == (
        "--source-lang de --target-lang en --tokenizer moses --moses-no-dash-splits "
        f"--bpe subword_nmt --bpe-codes {(out / 'text' / 'code').resolve()}"
    )


def test_load_translator_encodes_raw_text_as_data_prep_did(trained):
    out, checkpoint, raw_test = trained
    translator = load_translator(checkpoint, data_prep_out=out)
    unk = translator.hub.src_dict.unk()
    # the model sees exactly the BPE'd text data prep wrote for the same sentences
    bpe_test = (out / "text" / "test.de").read_text().splitlines()[:3]
    for raw, bpe in zip(raw_test, bpe_test):
        ids = translator.encode(raw)
        assert unk not in ids.tolist()
        assert translator.hub.src_dict.string(ids) == bpe
        # ... and the way back (BPE removed, Moses detokenised) gives the raw sentence, lowercased
        assert translator.hub.decode(ids) == raw.lower()


def test_translate_takes_raw_text_and_returns_detokenised_text(trained):
    out, checkpoint, raw_test = trained
    translator = load_translator(checkpoint, data_prep_out=out)
    one = translator.translate(raw_test[0], beam=2, max_len_b=8)
    many = translator.translate(raw_test, beam=2, max_len_b=8)
    assert isinstance(one, str) and one == many[0] and len(many) == 3
    hypo = translator.hub.generate([translator.encode(raw_test[0])], beam=2, max_len_b=8)[0][0]["tokens"]
    assert one == translator.hub.decode(hypo) and "@@" not in one


def test_from_pretrained_without_tokenizer_and_bpe_turns_raw_text_into_unknowns(trained):
    """What the README's earlier fairseq-interactive command (no --tokenizer / --bpe) did to raw text."""
    out, checkpoint, raw_test = trained
    hub = ResidualTransformerModel.from_pretrained(
        str(checkpoint.parent), checkpoint_file=checkpoint.name, data_name_or_path=str(out / "bin")
    )
    ids = hub.encode(raw_test[0]).tolist()
    assert ids.count(hub.src_dict.unk()) > len(ids) // 2


def test_load_translator_names_a_folder_without_the_record(trained, tmp_path):
    _, checkpoint, _ = trained
    (tmp_path / "summary.json").write_text(json.dumps({"recipe": "custom"}))
    with pytest.raises(DataError, match="records no tokeniser and subword settings"):
        load_translator(checkpoint, data_prep_out=tmp_path)
    with pytest.raises(DataError, match="data_prep_out must be the --out folder"):
        load_translator(checkpoint, data_prep_out=tmp_path / "missing")


def test_fairseq_from_pretrained_needs_the_plugin_imported_or_user_dir(trained):
    """fairseq cannot find the model without the plugin: documented (README), with user_dir= as the fix."""
    out, checkpoint, raw_test = trained
    script = (
        "import sys\n"
        "from fairseq.models.transformer import TransformerModel\n"
        "kw = dict(checkpoint_file=sys.argv[2], data_name_or_path=sys.argv[3])\n"
        "try:\n"
        "    TransformerModel.from_pretrained(sys.argv[1], **kw)\n"
        "except KeyError as e:\n"
        "    print('KeyError', e)\n"
        "hub = TransformerModel.from_pretrained(sys.argv[1], user_dir=sys.argv[4], **kw)\n"
        "print(type(hub.models[0]).__name__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(checkpoint.parent), checkpoint.name, str(out / "bin")]
        + [str(ROOT / "fairseq_residual")],
        cwd=out,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == ["KeyError \"'_name'\"", "ResidualTransformerModel"]


def readme_interactive_block():
    """The README's fairseq-interactive example: the indented block that starts with ``OUT=``."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    OUT="))
    block = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        block.append(line[4:])
    return block


def test_readme_interactive_command_translates_raw_text_from_another_folder(trained, tmp_path):
    """The README's command, run as written (from a folder outside the repository, the plugin found
    through the installed package) with only OUT and CKPT set to this test's files."""
    out, checkpoint, raw_test = trained
    block = readme_interactive_block()
    assert block[0].startswith("OUT=") and "CKPT=" in block[0]
    (tmp_path / "raw.de").write_text("\n".join(raw_test) + "\n")
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, OUT=str(out), CKPT=str(checkpoint), PYTHONWARNINGS="ignore")
    env["PATH"] = bin_dir + os.pathsep + env["PATH"]
    env.pop("PYTHONPATH", None)
    script = "set -euo pipefail\n" + "\n".join(block[1:]) + " --cpu --max-len-b 8\n"
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sources = re.findall(r"^S-\d+\t(.*)$", proc.stdout, flags=re.M)
    detok = re.findall(r"^D-\d+\t[^\t]*\t(.*)$", proc.stdout, flags=re.M)
    assert len(sources) == len(detok) == 3
    assert not any("<unk>" in s for s in sources)
    translator = load_translator(checkpoint, data_prep_out=out)
    assert detok == translator.translate(raw_test, beam=5, max_len_b=8)


def test_load_translator_logs_no_configuration_dump(trained, caplog):
    out, checkpoint, _ = trained
    with caplog.at_level(logging.INFO):
        load_translator(checkpoint, data_prep_out=out)
    assert caplog.records, "fairseq's own log lines stay"
    assert [r.name for r in caplog.records if not isinstance(r.msg, str)] == []  # the 10 KB config, logged as a dict
