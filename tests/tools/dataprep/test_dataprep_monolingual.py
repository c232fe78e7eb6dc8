"""The monolingual recipe (``data-prep/prepare-monolingual.sh``): raw text -> Moses + BPE or SentencePiece ->
``fairseq-preprocess --only-source``, the data-bin fairseq's language_modeling task reads."""

import json
import re
from pathlib import Path

import pytest
from fixtures_dataprep import write_monolingual

from fairseq_residual_tools.dataprep import monolingual


def lines(path):
    return Path(path).read_text(encoding="utf-8").splitlines()


def prepare(out, paths, *options):
    argv = ["--train", str(paths["train"]), "--valid", str(paths["valid"]), "--out", str(out)]
    if "test" in paths:
        argv += ["--test", str(paths["test"])]
    return monolingual.main([*argv, "--workers", "1", "--quiet", *options])


def sentences_in(databin, split):
    from fairseq.data import Dictionary, data_utils

    dictionary = Dictionary.load(str(databin / "dict.txt"))
    dataset = data_utils.load_indexed_dataset(str(databin / split), dictionary)
    return [dictionary.string(dataset[i]) for i in range(len(dataset))]


@pytest.fixture(scope="module")
def bpe_out(tmp_path_factory):
    root = tmp_path_factory.mktemp("monolingual")
    paths = write_monolingual(root / "raw")
    assert prepare(root / "out", paths, "--bpe-merges", "120") == 0
    return root / "out", paths


def test_bpe_recipe_binarises_every_line_of_each_split_for_language_modeling(bpe_out):
    out, paths = bpe_out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["recipe"] == "monolingual" and summary["lines"] == {"train": 300, "valid": 20, "test": 20}
    assert sorted(p.name for p in (out / "bin").glob("*.bin")) == ["test.bin", "train.bin", "valid.bin"]
    assert (out / "bin" / "dict.txt").is_file() and not list((out / "bin").glob("dict.*.*.txt"))
    valid = sentences_in(out / "bin", "valid")
    assert valid == lines(out / "text" / "valid")  # the binarised text is the subword text, line for line
    numbers = [int(re.search(r"\b\d+\b", re.sub(r"@@( |$)", "", x)).group()) for x in valid]
    assert numbers == list(range(1001, 1021))
    assert sum("@@ " in x for x in lines(out / "text" / "train")) > 0
    tokenised = lines(out / "tmp" / "train.tok")
    assert "&quot;" in tokenised[3] and "&apos;s" in tokenised[3]  # Moses' escaping, as tokenizer.perl
    assert [re.sub(r"@@( |$)", "", x) for x in lines(out / "text" / "train")] == tokenised


def test_the_language_model_record_holds_what_raw_text_goes_through(bpe_out):
    out, _ = bpe_out
    record = json.loads((out / "summary.json").read_text())["language_model"]
    assert record["lang"] == "en" and record["data_bin"] == "bin"
    assert record["tokenizer"] == "moses" and record["bpe"] == "subword_nmt" and record["bpe_codes"] == "text/code"
    flags = record["fairseq_eval_lm_flags"]
    assert flags.startswith("--task language_modeling --tokenizer moses --moses-no-dash-splits --bpe subword_nmt")
    assert flags.endswith(f"--bpe-codes {(out / 'text' / 'code').resolve()}")


def test_a_second_run_skips_every_stage(bpe_out):
    out, paths = bpe_out
    before = {p: p.stat().st_mtime_ns for p in (out / "bin").iterdir()}
    args = ["--train", str(paths["train"]), "--valid", str(paths["valid"]), "--test", str(paths["test"])]
    stages = monolingual.prepare(
        monolingual.build_parser().parse_args(
            [*args, "--out", str(out), "--quiet"] + ["--workers", "1", "--bpe-merges", "120"]
        )
    )
    assert stages.ran == [] and "binarise" in stages.skipped
    assert before == {p: p.stat().st_mtime_ns for p in (out / "bin").iterdir()}


def test_sentencepiece_recipe_decodes_back_to_the_raw_text(tmp_path):
    paths = write_monolingual(tmp_path / "raw", sizes=(("train", 200), ("valid", 10)))
    assert prepare(tmp_path / "out", paths, "--subword", "sentencepiece", "--spm-vocab", "80") == 0
    out = tmp_path / "out"
    decoded = ["".join(x.split()).replace("\u2581", " ").strip() for x in sentences_in(out / "bin", "valid")]
    assert decoded == lines(paths["valid"])
    record = json.loads((out / "summary.json").read_text())["language_model"]
    assert record["tokenizer"] is None and record["sentencepiece_model"] == "text/spm.model"
    assert not (out / "bin" / "test.bin").exists()


@pytest.mark.parametrize("problem", ["missing", "empty"])
def test_a_missing_or_empty_input_is_one_line_naming_the_file(problem, tmp_path, capsys):
    paths = write_monolingual(tmp_path / "raw", sizes=(("train", 5), ("valid", 2)))
    if problem == "missing":
        paths["valid"].unlink()
        expected = f"error: missing file {paths['valid']}: --valid must name a plain text file"
    else:
        paths["train"].write_text("")
        expected = f"error: empty corpus: {paths['train']} (--train) has no lines"
    assert prepare(tmp_path / "out", paths) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(expected), err
    assert not (tmp_path / "out" / "bin").exists()
