"""The Bible recipe (``data-prep/prepare-bible.sh``): SWORD modules read with diatheke -> verse pairs aligned chapter by
chapter -> held-out chapters -> the IWSLT recipe's processing. Run on a fixture in diatheke's output format, served by
a stand-in ``diatheke`` (the Debian packages cannot be assumed on CI)."""

import json
import re
from pathlib import Path

import pytest
from fixtures_dataprep import BIBLE_DROPPED, build_bible, fake_diatheke

from fairseq_residual_tools.analysis import bible_study
from fairseq_residual_tools.dataprep import bible, sword
from fairseq_residual_tools.errors import DataError


def lines(path):
    return Path(path).read_text(encoding="utf-8").splitlines()


def ids(text_lines):
    return [int(re.search(r"\bv(\d+)\b", line).group(1)) for line in text_lines]


def prepare(out, diatheke, *options):
    argv = ["--out", str(out), "--diatheke", str(diatheke), "--no-install", "--workers", "1", "--quiet"]
    return bible.main([*argv, "--valid-verses", "30", "--test-verses", "30", "--bpe-merges", "100", *options])


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("bible")
    kept = build_bible(root / "modules")
    diatheke = fake_diatheke(root / "diatheke", root / "modules")
    assert prepare(root / "out", diatheke) == 0
    return root / "out", kept, diatheke


def test_every_verse_pair_survives_aligned_except_the_chapters_the_modules_number_differently(prepared):
    out, kept, _ = prepared
    dropped = json.loads((out / "tmp" / "dropped-chapters.json").read_text())
    assert dropped.keys() == BIBLE_DROPPED.keys()
    assert all(dropped[c].startswith(reason) for c, reason in BIBLE_DROPPED.items())
    keys = [(b, int(c), int(v)) for b, c, v in (line.split("\t") for line in lines(out / "tmp" / "aligned.keys"))]
    assert keys == sorted(kept, key=lambda k: ([b for b, *_ in keys].index(k[0]), k[1], k[2]))
    es, en = lines(out / "tmp" / "aligned.es"), lines(out / "tmp" / "aligned.en")
    assert ids(es) == ids(en) == [kept[k] for k in keys]  # verse i of one side is verse i of the other


def test_markup_headings_notes_and_back_matter_are_removed_and_glued_words_split(prepared):
    out, kept, _ = prepared
    keys = lines(out / "tmp" / "aligned.keys")
    es, en = lines(out / "tmp" / "aligned.es"), lines(out / "tmp" / "aligned.en")
    assert not any("<" in line or ">" in line for line in es + en)
    garden = keys.index("Genesis\t2\t3")
    assert "The Garden" not in en[garden] and "footnote" not in en[garden] and en[garden].endswith("& more")
    # the English module writes the 2nd and 3rd words' elements with no space between them: still two words
    assert all(re.match(r"^\S+ v\d+ \S+", line) for line in en)
    matthew_end = keys.index("Matthew\t8\t12")
    assert "Abba" not in en[matthew_end] and "Tobit" not in " ".join(keys)


def test_psalm_headings_are_cut_from_the_spanish_verse_1_and_never_read_from_pre_verse_titles(prepared):
    out, _, _ = prepared
    keys = lines(out / "tmp" / "aligned.keys")
    es, en = lines(out / "tmp" / "aligned.es"), lines(out / "tmp" / "aligned.en")
    first = [i for i, k in enumerate(keys) if k.startswith("Psalms\t") and k.endswith("\t1")]
    assert len(first) == 4
    assert all(es[i].startswith("OH ") and "Salmo" not in es[i] for i in first)
    assert not any("Psalm by David" in line for line in en)


def test_held_out_splits_are_whole_chapters_disjoint_and_of_the_size_asked(prepared):
    out, kept, _ = prepared
    chapters, seen = {}, set()
    for split in bible.SPLITS:
        keys = lines(out / "tmp" / f"{split}.keys")
        chapters[split] = {tuple(k.split("\t")[:2]) for k in keys}
        raw = {lang: lines(out / "tmp" / f"{split}.raw.{lang}") for lang in ("es", "en")}
        assert (
            ids(raw["es"]) == ids(raw["en"]) == [kept[(b, int(c), int(v))] for b, c, v in (k.split("\t") for k in keys)]
        )
        assert seen.isdisjoint(ids(raw["es"]))
        seen |= set(ids(raw["es"]))
    assert seen == set(kept.values())
    assert all(chapters[a].isdisjoint(chapters[b]) for a in chapters for b in chapters if a != b)
    held = {s: len(lines(out / "tmp" / f"{s}.keys")) for s in ("valid", "test")}
    assert all(30 <= n < 30 + 12 for n in held.values())  # whole chapters of at most 12 verses until 30 are held


def test_the_iwslt_processing_follows_and_the_summary_counts_pairs_and_dropped_chapters(prepared):
    out, kept, _ = prepared
    summary = json.loads((out / "summary.json").read_text())
    assert summary["recipe"] == "bible" and sum(summary["pairs"].values()) == len(kept)
    assert summary["verses"]["aligned"] == len(kept) and summary["verses"]["chapters_dropped"] == 4
    assert summary["translation"]["lowercase"] is True and summary["translation"]["tokenizer"] == "moses"
    test_en = lines(out / "tmp" / "test.en")
    assert test_en == [line.lower() for line in test_en] and all(line.endswith(" .") for line in test_en)
    assert [re.sub(r"@@( |$)", "", x) for x in lines(out / "text" / "test.en")] == test_en
    assert (out / "bin" / "dict.es.txt").is_file() and (out / "bin" / "train.es-en.en.bin").is_file()


def test_the_untouched_test_verses_and_their_chapters_are_kept_beside_the_data_bin_for_scoring(prepared):
    out, kept, _ = prepared
    summary = json.loads((out / "summary.json").read_text())
    record = summary["test_text"]
    (test,) = record["sets"]
    assert record["lowercase"] is True and test["files"]["en"]["path"] == "test-text/test.en"
    references, sources = lines(out / test["files"]["en"]["path"]), lines(out / test["files"]["es"]["path"])
    assert references == lines(out / "tmp" / "test.raw.en") and sources == lines(out / "tmp" / "test.raw.es")
    assert references != lines(out / "tmp" / "test.en")  # as the module gives them, not Moses-tokenised
    keys = [k.split("\t") for k in lines(out / "tmp" / "test.keys")]
    assert lines(out / test["documents"]) == [f"{book} {chapter}" for book, chapter, _ in keys]
    scored = bible_study.test_text(out / "bin")  # what the study scores against
    assert scored["references"] == references and scored["lowercase"] and len(scored["documents"]) == len(keys)
    # one line for each of fairseq's test samples, in order
    assert len(references) == summary["pairs"]["test"] == len(lines(out / "text" / "test.en"))


def test_a_second_run_redoes_nothing_and_another_held_out_size_redoes_from_the_split(prepared, caplog):
    out, _, diatheke = prepared
    before = (out / "summary.json").read_text()
    assert prepare(out, diatheke) == 0
    assert (out / "summary.json").read_text() == before
    stages = bible.prepare(
        bible.build_parser().parse_args(
            [
                "--out",
                str(out),
                "--diatheke",
                str(diatheke),
                "--no-install",
                "--workers",
                "1",
                "--quiet",
                "--valid-verses",
                "30",
                "--test-verses",
                "40",
                "--bpe-merges",
                "100",
            ]
        )
    )
    assert stages.ran[0] == "split" and "extract.es" in stages.skipped and "align" in stages.skipped


def test_without_diatheke_or_a_module_it_stops_in_one_line_naming_the_command_that_installs_them(tmp_path, capsys):
    assert prepare(tmp_path / "out", tmp_path / "no-diatheke") == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "apt-get install -y --no-install-recommends diatheke sword-text-sparv" in err
    only_english = fake_diatheke(tmp_path / "diatheke", tmp_path, listed=("engWEB2015eb",))
    assert prepare(tmp_path / "out", only_english) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and err.endswith("(or leave out --no-install)") and "sword-text-sparv" in err
    assert "sword-text-web" not in err.split("`")[1]


def test_with_installing_allowed_but_no_apt_get_it_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither diatheke nor apt-get nor sudo
    with pytest.raises(DataError, match="no apt-get to install the Debian packages diatheke sword-text-sparv"):
        sword.ensure_modules("diatheke", dict(bible.MODULES.values()), install=True)


def test_only_spanish_and_english_are_offered(tmp_path, capsys):
    assert prepare(tmp_path / "out", tmp_path / "diatheke", "--src", "de") == 1
    assert "use --src es --tgt en or --src en --tgt es" in capsys.readouterr().err
