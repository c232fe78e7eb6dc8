"""A cell's record names its data (recipe, languages, pairs, archives, the data-bin's sha256), and calls it the
paper's only when data prep's recipe, archives, settings and the unchanged data-bin all say so."""

import json

import pytest

from fairseq_residual_tools.dataprep import iwslt14
from fairseq_residual_tools.dataprep.download import DEFAULT_CHECKSUMS
from fairseq_residual_tools.dataprep.pipeline import databin_sha256
from fairseq_residual_tools.files import write_json
from fairseq_residual_tools.repro import data_record as data_record_module
from fairseq_residual_tools.repro.data_record import data_record, describe

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
