"""Translating raw text with a trained model: the plugin's load_translator, fairseq's from_pretrained and
docs/translating.md's fairseq-interactive commands, on a checkpoint trained on data-prep output.

The data is the embedded corpus named de/en and prepared by the custom recipe with IWSLT-14's steps
(Moses tokenisation without dash splitting, lowercasing, joint BPE), so the IWSLT command runs on it
unchanged, and so does the command for one's own corpus (which reads the flags from summary.json).
"""

import json
import logging
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pytest
import torch
from helpers import ROOT, run_cli, train_args
from omegaconf import OmegaConf

from fairseq_residual.errors import DataError
from fairseq_residual.hub import load_translator
from fairseq_residual.model import ResidualTransformerModel
from fairseq_residual.schemes import SCHEMES

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


def checkpoint_of_scheme(checkpoint, scheme, task, folder, **options):
    """``checkpoint`` with its model replaced by a freshly initialised one of ``scheme`` and the model ``options``
    (Admin profiled on a random batch, as its first training batch would), in fairseq's checkpoint format."""
    state = torch.load(checkpoint, weights_only=False)
    state["cfg"]["model"].update(residual_scheme=scheme, **options)
    torch.manual_seed(0)
    model = ResidualTransformerModel.build_model(OmegaConf.create(state["cfg"]["model"]), task)
    src = torch.randint(task.source_dictionary.nspecial, len(task.source_dictionary), (4, 9))
    with torch.no_grad():
        model.train()(src, torch.full((4,), 9), src)
    state["model"] = model.state_dict()
    path = folder / f"{scheme}.pt"
    torch.save(state, path)
    return path


def test_one_translator_shared_by_threads_gives_the_single_thread_translations(trained, tmp_path):
    out, checkpoint, _ = trained
    sentences = Path(out / "text" / "test.de").read_text().splitlines()[:8]  # BPE'd, which is text as well
    task = load_translator(checkpoint, data_prep_out=out).hub.task
    for scheme in SCHEMES:
        translator = load_translator(checkpoint_of_scheme(checkpoint, scheme, task, tmp_path), data_prep_out=out)
        calls = [sentences[i % 8] if i % 3 else sentences[i % 8 : i % 8 + 3] for i in range(16)]
        alone = [translator.translate(text, beam=4, max_len_b=8) for text in calls]
        with ThreadPoolExecutor(max_workers=4) as pool:
            together = list(pool.map(partial(translator.translate, beam=4, max_len_b=8), calls))
        assert together == alone, scheme
        assert len(set(map(str, alone))) > 1, scheme  # different inputs, different outputs


def test_a_block_attention_residuals_checkpoint_loads_with_its_block_count_and_serves_threads(trained, tmp_path):
    out, checkpoint, _ = trained
    sentences = Path(out / "text" / "test.de").read_text().splitlines()[:8]
    task = load_translator(checkpoint, data_prep_out=out).hub.task
    path = checkpoint_of_scheme(checkpoint, "attn-res", task, tmp_path, attn_res_blocks=2)
    translator = load_translator(path, data_prep_out=out)
    model = translator.hub.models[0]
    assert (
        model.residual_scheme == "attn-res" and model.encoder.layer_norm.blocks == model.decoder.layer_norm.blocks == 2
    )
    saved = torch.load(path, weights_only=False)["model"]
    assert all(torch.equal(value, saved[name]) for name, value in model.state_dict().items())
    calls = [sentences[i % 8] if i % 3 else sentences[i % 8 : i % 8 + 3] for i in range(16)]  # one or a batch
    alone = [translator.translate(text, beam=4, max_len_b=8) for text in calls]
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(partial(translator.translate, beam=4, max_len_b=8), calls)) == alone
    assert all(isinstance(text, str) and text for text in alone[1:3])


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


def readme_interactive_block(which=0):
    """docs/translating.md's fairseq-interactive examples: the indented blocks that start with ``OUT=``."""
    lines = (ROOT / "docs" / "translating.md").read_text().splitlines()
    start = [i for i, line in enumerate(lines) if line.startswith("    OUT=")][which]
    block = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        block.append(line[4:])
    return block


def test_readme_interactive_command_translates_raw_text_from_another_folder(trained, tmp_path):
    """The IWSLT command, run as written (from a folder outside the repository, the plugin found
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


def test_own_corpus_interactive_command_reads_the_flags_from_summary_json(trained, tmp_path):
    """The command for one's own corpus, run as written with OUT and CKPT set; the corpus was prepared with
    --lowercase (summary.json says so), so its input is lowercased first, as the docs say."""
    out, checkpoint, raw_test = trained
    block = readme_interactive_block(1)
    assert block[0].startswith("OUT=") and "summary.json" in block[2] and block[3].endswith("< raw.src")
    (tmp_path / "raw.src").write_text("\n".join(line.lower() for line in raw_test) + "\n")
    env = dict(os.environ, OUT=str(out), CKPT=str(checkpoint), PYTHONWARNINGS="ignore")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    env.pop("PYTHONPATH", None)
    script = "set -euo pipefail\n" + "\n".join(block[1:3]) + "\n" + block[3].replace(" < raw.src", "")
    script += " --cpu --max-len-b 8 < raw.src\n"
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sources = re.findall(r"^S-\d+\t(.*)$", proc.stdout, flags=re.M)
    detok = re.findall(r"^D-\d+\t[^\t]*\t(.*)$", proc.stdout, flags=re.M)
    assert len(sources) == len(detok) == 3 and not any("<unk>" in s for s in sources)
    assert detok == load_translator(checkpoint, data_prep_out=out).translate(raw_test, beam=5, max_len_b=8)


def test_load_translator_logs_nothing_but_verbose_shows_fairseqs_lines(trained, caplog, monkeypatch):
    """fairseq logs the 10 KB configuration (as a dict), the archive it loads and the two dictionaries' sizes."""
    out, checkpoint, _ = trained
    with caplog.at_level(logging.INFO):
        load_translator(checkpoint, data_prep_out=out)
    assert [f"{r.name}: {r.getMessage()}" for r in caplog.records] == []
    caplog.clear()
    monkeypatch.setenv("FAIRSEQ_RESIDUAL_VERBOSE", "1")
    with caplog.at_level(logging.INFO):
        load_translator(checkpoint, data_prep_out=out)
    said = [r.getMessage() for r in caplog.records if isinstance(r.msg, str)]
    assert any(m.startswith("loading archive file ") for m in said) and "[de] dictionary: " in " ".join(said)


def test_translate_logs_nothing(trained, caplog):
    """fairseq logs its batch-iterator bookkeeping (four lines) on every generate() of the hub interface."""
    out, checkpoint, raw_test = trained
    translator = load_translator(checkpoint, data_prep_out=out)
    with caplog.at_level(logging.DEBUG):
        for line in raw_test[:2]:
            translator.translate(line, beam=2, max_len_b=5)
    assert [f"{r.name}: {r.getMessage()}" for r in caplog.records] == []


@pytest.mark.parametrize("source", ["stdin", "--input"])
def test_interactive_says_once_that_its_input_is_not_utf8(trained, tmp_path, source):
    """Latin-1 on stdin (here under the C locale, where Python reads undecodable bytes as escapes): fairseq turned
    its accented letters into <unk> without a word. Latin-1 in a file given by --input (which fairseq opens as UTF-8
    under every locale): a UnicodeDecodeError traceback. Now both translate every line, and one line on stderr says
    that the input, or the file, is not UTF-8."""
    out, checkpoint, raw_test = trained
    codes = out / json.loads((out / "summary.json").read_text())["translation"]["bpe_codes"]
    args = [str(out / "bin"), "--user-dir", str(ROOT / "fairseq_residual"), "--path", str(checkpoint)]
    args += ["--source-lang", "de", "--target-lang", "en", "--tokenizer", "moses", "--bpe", "subword_nmt"]
    args += ["--bpe-codes", str(codes), "--cpu", "--beam", "1", "--max-len-b", "4"]
    latin1 = f"{raw_test[0]}\nüber die straße\ngroß\n".encode("latin-1")
    (tmp_path / "raw.de").write_bytes(latin1)
    args += ["--input", "raw.de"] if source == "--input" else []
    env = dict(os.environ, PYTHONWARNINGS="ignore", LC_ALL="C")
    proc = subprocess.run(
        [sys.executable, "-m", "fairseq_cli.interactive", *args],
        input=latin1 if source == "stdin" else b"",
        capture_output=True,
        cwd=tmp_path,
        env=env,
    )
    stdout, stderr = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, stderr[-3000:]
    assert len(re.findall(r"^H-\d+\t", stdout, flags=re.M)) == 3  # every line translated
    said = [line for line in stderr.splitlines() if "UTF-8" in line]
    named = "the input" if source == "stdin" else "the input file raw.de"
    assert said == [
        f"fairseq-interactive: {named} is not UTF-8 (line 2 holds the byte 0xfc, which UTF-8 cannot decode): such "
        "characters become <unk>; convert it first (iconv -f latin1 -t utf-8)"
    ], stderr[-3000:]
