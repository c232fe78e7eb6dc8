"""A cell's record names its data (recipe, languages, pairs, archives, the data-bin's sha256), and calls it the
paper's only when data prep's recipe, archives, settings and the unchanged data-bin all say so; sacreBLEU's references
are the untouched test text data prep recorded beside the data-bin."""

import json

import pytest

from fairseq_residual_tools.dataprep import iwslt14
from fairseq_residual_tools.dataprep.download import DEFAULT_CHECKSUMS
from fairseq_residual_tools.dataprep.pipeline import databin_sha256, file_sha256
from fairseq_residual_tools.errors import DataError
from fairseq_residual_tools.files import write_json
from fairseq_residual_tools.repro import data_record as data_record_module
from fairseq_residual_tools.repro.data_record import data_record, describe, untouched_test_sets

PAIRS = {"train": 160239, "valid": 7283, "test": 6750}
RELEASE = "5" * 64  # the IWSLT archive's sha256 as a first download pins it (checksums.json has none of its own)


@pytest.fixture(autouse=True)
def pinned_release(tmp_path, monkeypatch):
    """The package's checksums.json after ``prepare-iwslt14.sh --record-checksum`` pinned the IWSLT archive."""
    checksums = json.loads(DEFAULT_CHECKSUMS.read_text())
    checksums["archives"]["de-en.tgz"]["sha256"] = RELEASE
    write_json(tmp_path / "checksums.json", checksums)
    monkeypatch.setattr(data_record_module, "DEFAULT_CHECKSUMS", tmp_path / "checksums.json")


def prepared(tmp_path, recipe="iwslt14", archive=RELEASE, **options):
    """A data prep output folder: a data-bin of two files and the summary.json a recipe writes beside it."""
    databin = tmp_path / "out" / "bin"
    databin.mkdir(parents=True)
    (databin / "dict.de.txt").write_text("hallo 3\n")
    (databin / "train.de-en.de.bin").write_bytes(b"\x01\x02")
    summary = {
        "recipe": recipe,
        "pairs": PAIRS,
        "translation": {"source_lang": "de", "target_lang": "en", "lowercase": True, "tokenizer": "moses"},
        "data_bin": str(databin),
        "data_bin_sha256": databin_sha256(databin),
        "archives": {"de-en.tgz": archive},
        "options": {**vars(iwslt14.build_parser().parse_args([])), "workers": 2, "out": str(tmp_path), **options},
    }
    write_json(databin.parent / "summary.json", summary)
    return databin


def test_data_prepared_by_the_datasets_recipe_from_the_release_as_the_paper_did_is_the_papers(tmp_path):
    record = data_record(prepared(tmp_path), "iwslt14")
    assert record["papers_data"] is True and record["not_the_papers_because"] is None
    assert (record["recipe"], record["languages"], record["pairs"]) == ("iwslt14", "de-en", PAIRS)
    assert record["data_bin_sha256"] == record["data_bin_sha256_at_prep"]
    assert len(record["data_bin_sha256"]) == 64


@pytest.mark.parametrize(
    "change, because",
    [
        ({"recipe": "custom"}, "made by data prep's custom recipe, not by iwslt14's"),
        ({"archive": "0" * 64}, f"archive de-en.tgz has checksum {'0' * 64}, not the release's {RELEASE}"),
        ({"bpe_merges": 200}, "--bpe-merges 200 instead of the recipe's 10000"),
        ({"src": "en", "tgt": "de"}, "--src en instead of the recipe's de; --tgt de instead of the recipe's en"),
    ],
)
def test_another_recipe_archive_or_setting_is_not_the_papers_data_and_says_why(tmp_path, change, because):
    record = data_record(prepared(tmp_path, **change), "iwslt14")
    assert record["papers_data"] is False and record["not_the_papers_because"] == because


def test_an_archive_the_package_pins_no_checksum_for_is_not_known_to_be_the_release(tmp_path, monkeypatch):
    monkeypatch.setattr(data_record_module, "DEFAULT_CHECKSUMS", DEFAULT_CHECKSUMS)  # as committed: IWSLT unpinned
    record = data_record(prepared(tmp_path), "iwslt14")
    assert record["papers_data"] is False
    assert record["not_the_papers_because"] == "the package pins no checksum of archive de-en.tgz (checksums.json)"


def test_a_data_bin_changed_after_data_prep_is_not_the_papers_data(tmp_path):
    databin = prepared(tmp_path)
    before = data_record(databin, "iwslt14")["data_bin_sha256"]
    (databin / "train.de-en.de.bin").write_bytes(b"\x01\x03")  # the same size, other bytes
    record = data_record(databin, "iwslt14")
    assert record["papers_data"] is False and record["data_bin_sha256"] != before
    assert record["not_the_papers_because"] == (
        f"the data-bin changed after data prep (sha256 {record['data_bin_sha256'][:12]}, data prep wrote {before[:12]})"
    )


def test_a_data_bin_without_a_summary_is_named_and_not_the_papers(tmp_path):
    databin = prepared(tmp_path)
    (databin.parent / "summary.json").unlink()
    record = data_record(databin, "iwslt14")
    assert record["papers_data"] is False and record["summary_json"] is None
    assert record["not_the_papers_because"] == "no data prep summary.json beside the data-bin: what it holds is unknown"
    assert describe(record) == f"data-bin out/bin, sha256 {databin_sha256(databin)[:12]}"


def test_the_description_names_recipe_languages_pairs_and_hash(tmp_path):
    databin = prepared(tmp_path, recipe="custom")
    assert describe(data_record(databin, "iwslt14")) == (
        "data-bin out/bin, data prep's custom recipe, de-en, 160,239 train / 7,283 valid / 6,750 test pairs, "
        f"sha256 {databin_sha256(databin)[:12]}"
    )


def with_test_text(databin, lines=("It’s 10 o'clock.  ", "Abram’s son."), line_of_sample=None):
    """The test text a recipe keeps beside the data-bin, and its record in summary.json."""
    out, summary = databin.parent, json.loads((databin.parent / "summary.json").read_text())
    files = {}
    for lang, text in (("de", "Es ist 10 Uhr.\nAbrams Sohn.\n"), ("en", "".join(f"{x}\n" for x in lines))):
        (out / "test-text").mkdir(exist_ok=True)
        (out / "test-text" / f"test.{lang}").write_text(text, encoding="utf-8")
        sha256 = file_sha256(out / "test-text" / f"test.{lang}")
        files[lang] = {"path": f"test-text/test.{lang}", "sha256": sha256, "lines": len(lines)}
    if line_of_sample is not None:
        write_json(out / "test-text" / "test.line_of_sample.json", line_of_sample)
    entry = {"split": "test", "name": "test", "files": files, "line_of_sample": None}
    if line_of_sample is not None:
        entry["line_of_sample"] = "test-text/test.line_of_sample.json"
    summary["test_text"] = {"lowercase": True, "sets": [entry]}
    write_json(out / "summary.json", summary)
    return out


def test_the_untouched_test_text_is_read_by_split_and_direction_as_the_sacrebleu_command_reads_it(tmp_path):
    databin = prepared(tmp_path)
    out = with_test_text(databin)
    (test,) = untouched_test_sets(databin, "de", "en").values()
    assert (test.split, test.name, test.lowercase, test.line_of_sample) == ("test", "test", True, None)
    assert test.lines == ["It’s 10 o'clock.", "Abram’s son."]  # trailing spaces stripped, as sacrebleu does
    assert test.path == str(out / "test-text" / "test.en") and test.sha256 == file_sha256(out / "test-text/test.en")
    assert untouched_test_sets(databin, "en", "de")["test"].lines == ["Es ist 10 Uhr.", "Abrams Sohn."]
    assert data_record(databin, "iwslt14")["test_text"]["lowercase"] is True


def test_a_recipes_sample_id_mapping_is_read_with_the_text(tmp_path):
    databin = prepared(tmp_path)
    with_test_text(databin, lines=("dropped", "kept 2", "kept 1"), line_of_sample=[2, 1])
    assert untouched_test_sets(databin, "de", "en")["test"].line_of_sample == [2, 1]


@pytest.mark.parametrize("problem", ["no summary", "prepared before", "changed", "other direction"])
def test_a_data_bin_without_its_untouched_test_text_stops_in_one_line_naming_the_fix(tmp_path, problem):
    databin = prepared(tmp_path)
    summary = databin.parent / "summary.json"
    expected = f"{databin} was prepared before data prep recorded the untouched test text: re-run "
    expected += f"bash data-prep/prepare-iwslt14.sh with the options in {summary}"
    src = "de"
    if problem == "no summary":
        summary.unlink()
        expected = f"{databin} has no data prep summary.json beside it: sacreBLEU scores against the untouched test"
    elif problem == "changed":
        out = with_test_text(databin)
        (out / "test-text" / "test.en").write_text("It's 10 o'clock.\nAbram's son.\n", encoding="utf-8")
        expected = f"{out / 'test-text' / 'test.en'} is not the test text data prep recorded (missing or changed)"
    elif problem == "other direction":
        with_test_text(databin)
        src = "fr"
        expected = f"{summary} records no untouched test text for fr-en: re-run bash data-prep/prepare-iwslt14.sh"
    with pytest.raises(DataError) as error:
        untouched_test_sets(databin, src, "en")
    assert str(error.value).startswith(expected) and "\n" not in str(error.value)
