"""The four data-prep entry points, run as a user runs them (``bash data-prep/prepare-*.sh``)
against fixture archives with the real releases' layout, through the mirror overrides.

Each recipe runs once per session; the tests read what it produced.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from fixtures_dataprep import build_iwslt, build_opus, build_wmt, pair, write_checksums, write_parallel
from helpers import ROOT

from fairseq_residual_tools.dataprep.pipeline import databin_sha256

pytestmark = pytest.mark.slow  # the recipes run as scripts (fairseq-preprocess inside)

REPO = ROOT
NUMBER = re.compile(r"\b\d+\b")


def run_script(name, args, env=None):
    full_env = dict(os.environ, PYTHONWARNINGS="ignore", **(env or {}))
    return subprocess.run(
        ["bash", str(REPO / "data-prep" / f"prepare-{name}.sh"), *map(str, args)],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
    )


def ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def lines(path):
    return Path(path).read_text(encoding="utf-8").splitlines()


def unbpe(line):
    return re.sub(r"@@( |$)", "", line)


def ids(path, decode=unbpe):
    """The sentence id (the number the fixtures put in every pair) of each line."""
    return [int(NUMBER.search(decode(line)).group()) for line in lines(path)]


def load_translation(databin, src, tgt, split):
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            str(databin),
            "--task",
            "translation",
            "--source-lang",
            src,
            "--target-lang",
            tgt,
            "--arch",
            "transformer",
            "--cpu",
        ],
    )
    task = tasks.setup_task(args)
    task.load_dataset(split)
    return task.dataset(split)


# ---------------------------------------------------------------- IWSLT-14


@pytest.fixture(scope="session")
def iwslt(tmp_path_factory):
    root = tmp_path_factory.mktemp("iwslt")
    archive, expected = build_iwslt(root / "mirror")
    checksums = write_checksums(root / "checksums.json", [archive])
    out = root / "out"
    args = [
        "--out",
        out,
        "--base-url",
        f"file://{archive.parent}",
        "--checksums",
        checksums,
        "--bpe-merges",
        200,
        "--workers",
        2,
    ]
    proc = ok(run_script("iwslt14", args))
    return SimpleNamespace(
        root=root, out=out, expected=expected, args=args, proc=proc, archive=archive, checksums=checksums
    )


def test_iwslt_split_sizes_follow_the_recipe(iwslt):
    # the fixture's pairs, less those the 1-175 / ratio 1.5 cleaning drops; every 23rd is valid
    summary = json.loads((iwslt.out / "summary.json").read_text())
    assert summary["pairs"] == iwslt.expected
    for split, n in iwslt.expected.items():
        for lang in ("de", "en"):
            assert len(lines(iwslt.out / "text" / f"{split}.{lang}")) == n
    assert summary["expected_pairs_real_release"] == {"train": 160239, "valid": 7283, "test": 6750}


def test_the_summary_names_the_archive_read_and_the_data_bins_content(iwslt):
    """What a cell's record uses to tell the paper's data from other data (repro/data_record.py)."""
    summary = json.loads((iwslt.out / "summary.json").read_text())
    fixture = json.loads(iwslt.checksums.read_text())["archives"]["de-en.tgz"]["sha256"]
    assert summary["archives"] == {"de-en.tgz": fixture}  # the fixture's, not the release's
    assert summary["data_bin_sha256"] == databin_sha256(iwslt.out / "bin")
    names = sorted(p.name for p in (iwslt.out / "bin").iterdir() if p.suffix in (".txt", ".bin", ".idx"))
    assert names[:2] == ["dict.de.txt", "dict.en.txt"] and len(names) == 2 + 3 * 2 * 2  # 3 splits x 2 sides x bin/idx


def test_iwslt_valid_is_every_23rd_cleaned_line(iwslt):
    cleaned = lines(iwslt.out / "tmp" / "train.tags.de-en.en")
    assert lines(iwslt.out / "tmp" / "valid.en") == cleaned[22::23]
    assert lines(iwslt.out / "tmp" / "train.en") == [x for i, x in enumerate(cleaned, 1) if i % 23]


def test_iwslt_leaves_no_markup_and_keeps_title_text(iwslt):
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            text = (iwslt.out / "text" / f"{split}.{lang}").read_text()
            assert not re.search(r"<|>|seg id|talkid|keywords", text), (split, lang)
    train = (iwslt.out / "tmp" / "train.tags.de-en.en").read_text()
    assert "speaker 90001 : the house" in train  # <title> line kept without its tags
    assert "ted talk subtitles and transcript : talk 91002 ." in train


def test_iwslt_text_is_moses_tokenised_escaped_and_lowercased(iwslt):
    train = (iwslt.out / "tmp" / "train.tags.de-en.en").read_text()
    assert "&quot;" in train and "it &apos;s" in train
    assert train == train.lower()
    test = lines(iwslt.out / "tmp" / "test.en")
    assert test[0] == "it &apos;s 100001 o &apos;clock ."  # ’ -> ' before tokenising, as fairseq's sed


def test_iwslt_bpe_is_applied_and_reversible(iwslt):
    applied = 0
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            bpe = lines(iwslt.out / "text" / f"{split}.{lang}")
            applied += sum("@@ " in x for x in bpe)
            assert [unbpe(x) for x in bpe] == lines(iwslt.out / "tmp" / f"{split}.{lang}")
    assert applied > 100
    assert len(lines(iwslt.out / "text" / "code")) == 201  # version line + 200 merges


def test_iwslt_records_the_readme_interactive_flags(iwslt):
    """summary.json's translation record is what docs/translating.md's fairseq-interactive command for IWSLT-14 uses."""
    record = json.loads((iwslt.out / "summary.json").read_text())["translation"]
    assert record["lowercase"] is True and record["bpe_codes"] == "text/code"
    codes = str((iwslt.out / "text" / "code").resolve())
    flags = record["fairseq_interactive_flags"].replace(codes, '"$OUT/text/code"')
    readme = " ".join((REPO / "docs" / "translating.md").read_text().replace("\\\n", " ").split())
    assert flags in readme and "sys.stdout.write(sys.stdin.read().lower())" in readme


def generation_of(prepared_lines, unk=None):
    """What fairseq-generate --remove-bpe prints for the prepared test text of a model that translates it exactly:
    its T- lines are the prepared references (``unk``: a word the dictionary lacks, printed as <unk>)."""
    from fairseq_residual_tools.repro import scoring

    rows = []
    for i, line in enumerate(prepared_lines):
        reference = unbpe(line).replace(unk, "<unk>") if unk else unbpe(line)
        rows.append(f"T-{i}\t{reference}\nH-{i}\t-0.1\t{unbpe(line)}\n")
    return scoring.parse_generate("".join(rows) + "Generate test with beam=5: BLEU4 = 99.0, 99/99/99/99 (BP=1.000)\n")


def sacrebleu_command(*args, env=None):
    command = [sys.executable, "-m", "sacrebleu", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout


def test_iwslt_keeps_the_untouched_test_text_with_its_record(iwslt):
    from fairseq_residual_tools.dataprep.pipeline import file_sha256

    record = json.loads((iwslt.out / "summary.json").read_text())["test_text"]
    assert record["lowercase"] is True  # the recipe lowercases: sacreBLEU scores with -lc
    (test,) = record["sets"]
    assert (test["split"], test["name"], test["line_of_sample"]) == ("test", "test", None)
    for lang in ("de", "en"):
        entry = test["files"][lang]
        assert entry["path"] == f"test-text/test.{lang}" and entry["lines"] == iwslt.expected["test"]
        assert entry["sha256"] == file_sha256(iwslt.out / entry["path"])
    # the <seg> text as released: its case and its curly apostrophe, which the prepared text lost
    assert lines(iwslt.out / "test-text" / "test.en")[0] == "It\u2019s 100001 o'clock."
    assert lines(iwslt.out / "tmp" / "test.en")[0] == "it &apos;s 100001 o &apos;clock ."
    assert ids(iwslt.out / "test-text" / "test.en") == ids(iwslt.out / "text" / "test.en")  # line i is sample id i


def test_iwslt_sacrebleu_is_the_sacrebleu_command_on_the_untouched_text_not_the_round_trip(iwslt, tmp_path):
    """A model that reproduces the prepared references exactly: against its T- lines (lowercased, ' for ’, an <unk>)
    it would score 100; against the release's text it scores what ``sacrebleu test-text/test.en -lc`` says."""
    from fairseq_residual_tools.repro import scoring
    from fairseq_residual_tools.repro.data_record import untouched_test_sets

    gen = generation_of(lines(iwslt.out / "text" / "test.en"), unk="100001")
    untouched = untouched_test_sets(iwslt.out / "bin", "de", "en")["test"]
    scores = scoring.score_iwslt(gen, untouched, "en")
    hypotheses = tmp_path / "hyp"
    hypotheses.write_text("".join(x + "\n" for x in scoring.detokenize(gen.hypotheses, "en")), encoding="utf-8")
    command = sacrebleu_command(iwslt.out / "test-text" / "test.en", "-i", hypotheses, "-lc", "-b", "-w", "2")
    assert scores["sacrebleu"] == float(command) and "case:lc" in scores["sacrebleu_signature"]
    round_trip = scoring.reference_sacrebleu(
        scoring.detokenize(gen.hypotheses, "en"), scoring.detokenize(gen.references, "en"), True
    )[0]
    assert round_trip != scores["sacrebleu"]


def test_iwslt_sides_stay_aligned_and_splits_are_disjoint(iwslt):
    seen = {}
    for split in ("train", "valid", "test"):
        de, en = ids(iwslt.out / "text" / f"{split}.de"), ids(iwslt.out / "text" / f"{split}.en")
        assert de == en, split
        seen[split] = set(de)
        assert len(seen[split]) == len(de)
    assert not seen["train"] & seen["valid"]
    assert not (seen["train"] | seen["valid"]) & seen["test"]


def test_fairseq_loads_the_iwslt_data_bin_in_both_directions(iwslt):
    for src, tgt in (("de", "en"), ("en", "de")):
        for split, n in iwslt.expected.items():
            dataset = load_translation(iwslt.out / "bin", src, tgt, split)
            assert len(dataset) == n
    assert (iwslt.out / "bin" / "dict.de.txt").read_text() == (iwslt.out / "bin" / "dict.en.txt").read_text()


def test_second_run_skips_every_stage_and_rewrites_nothing(iwslt):
    files = sorted(p for p in iwslt.out.rglob("*") if p.is_file())
    before = {p: p.stat().st_mtime_ns for p in files}
    proc = ok(run_script("iwslt14", iwslt.args))
    assert re.findall(r"\| stage (\S+)", iwslt.proc.stdout)  # the first run did run stages
    assert not re.findall(r"\| stage (\S+)", proc.stdout)
    assert "skip  binarise (done)" in proc.stdout
    assert {p: p.stat().st_mtime_ns for p in files} == before
    assert sorted(p for p in iwslt.out.rglob("*") if p.is_file()) == files


def test_force_redoes_every_stage_with_the_same_result(iwslt, tmp_path):
    from fairseq_residual_tools.dataprep import iwslt14

    out = tmp_path / "out"
    shutil.copytree(iwslt.out, out)
    args = iwslt14.build_parser().parse_args(
        [str(a) if a != iwslt.out else str(out) for a in iwslt.args] + ["--force", "--quiet"]
    )
    stages = iwslt14.prepare(args)
    assert not stages.skipped and "binarise" in stages.ran and "extract" in stages.ran
    for split in ("train", "valid", "test"):
        assert lines(out / "text" / f"{split}.en") == lines(iwslt.out / "text" / f"{split}.en")


def test_corrupted_archive_is_rejected_with_one_line(iwslt, tmp_path):
    bad = tmp_path / "mirror"
    bad.mkdir()
    data = bytearray(iwslt.archive.read_bytes())
    data[len(data) // 2] ^= 0x01
    (bad / "de-en.tgz").write_bytes(bytes(data))
    out = tmp_path / "out"
    proc = run_script("iwslt14", ["--out", out, "--base-url", f"file://{bad}", "--checksums", iwslt.checksums])
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: archive ") and "sha256" in last and "Traceback" not in proc.stderr
    assert (out / "downloads" / "de-en.tgz.corrupt").exists()
    assert not (out / "downloads" / "de-en.tgz").exists() and not (out / "orig" / "de-en").exists()


def test_wrong_language_pair_is_a_one_line_error(capsys):
    from fairseq_residual_tools.dataprep import iwslt14

    assert iwslt14.main(["--src", "fr", "--tgt", "en", "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: IWSLT-14 here is German-English: use --src de --tgt en or --src en --tgt de (got --src fr --tgt en)"
    ]


def test_training_starts_from_the_prepared_iwslt_data_bin(iwslt, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.train",
            str(iwslt.out / "bin"),
            "--user-dir",
            str(REPO / "fairseq_residual"),
            "--task",
            "translation",
            "--source-lang",
            "de",
            "--target-lang",
            "en",
            "--arch",
            "residual_transformer_iwslt_de_en",
            "--share-all-embeddings",
            "--encoder-layers",
            "1",
            "--decoder-layers",
            "1",
            "--encoder-embed-dim",
            "32",
            "--decoder-embed-dim",
            "32",
            "--encoder-ffn-embed-dim",
            "64",
            "--decoder-ffn-embed-dim",
            "64",
            "--encoder-attention-heads",
            "2",
            "--decoder-attention-heads",
            "2",
            "--optimizer",
            "adam",
            "--lr",
            "5e-4",
            "--max-tokens",
            "2048",
            "--max-update",
            "3",
            "--criterion",
            "label_smoothed_cross_entropy",
            "--label-smoothing",
            "0.1",
            "--cpu",
            "--no-save",
            "--disable-validation",
            "--log-format",
            "simple",
            "--log-interval",
            "1",
            "--save-dir",
            str(tmp_path / "ckpt"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    assert "ResidualTransformer" in log or "residual_transformer" in log
    assert re.search(r"num_updates 3\b|num_updates\": \"3\"|done training", log)


# ---------------------------------------------------------------- WMT'14


@pytest.fixture(scope="session")
def wmt(tmp_path_factory):
    root = tmp_path_factory.mktemp("wmt")
    archives, expected = build_wmt(root / "mirror")
    checksums = write_checksums(root / "checksums.json", archives)
    out = root / "out"
    # the mirror through the environment variable, as a plain folder
    proc = ok(
        run_script(
            "wmt14",
            ["--out", out, "--checksums", checksums, "--bpe-merges", 300, "--workers", 2],
            env={"WMT14_BASE_URL": str(root / "mirror")},
        )
    )
    return SimpleNamespace(out=out, expected=expected, proc=proc, mirror=root / "mirror")


def test_wmt_sizes_follow_the_recipe(wmt):
    summary = json.loads((wmt.out / "summary.json").read_text())
    assert summary["pairs"]["train"] == wmt.expected["train"]  # less empty, >250-token and ratio>1.5 pairs
    assert summary["pairs"]["valid"] == wmt.expected["tests"]["newstest2013"]
    for name, n in wmt.expected["tests"].items():
        assert summary["pairs"][name] == n
    assert summary["test_splits"]["test"] == "newstest2014"
    assert set(summary["test_splits"].values()) == {f"newstest{y}" for y in range(2010, 2017)}


def test_wmt_text_is_normalised_printable_and_aligned(wmt):
    train = (wmt.out / "tmp" / "train.tags.tok.de").read_text()
    assert "\u201e" not in train and "\x07" not in train and "&quot; Das Haus &quot;" in train
    for split in ("train", "valid", "test", "newstest2010", "newstest2016"):
        assert ids(wmt.out / "text" / f"{split}.en") == ids(wmt.out / "text" / f"{split}.de"), split
    test = lines(wmt.out / "tmp" / "newstest2014.en")
    assert test[0].startswith("He says it &apos;s the")


def test_wmt_splits_are_disjoint_and_bpe_reversible(wmt):
    train = set(ids(wmt.out / "text" / "train.en"))
    for name in ("valid", "test") + tuple(f"newstest{y}" for y in (2010, 2011, 2012, 2015, 2016)):
        assert not train & set(ids(wmt.out / "text" / f"{name}.en")), name
    assert [unbpe(x) for x in lines(wmt.out / "text" / "test.de")] == lines(wmt.out / "tmp" / "newstest2014.de")


def test_wmt_keeps_each_test_sets_sgml_text_as_sacrebleu_reads_it(wmt):
    record = json.loads((wmt.out / "summary.json").read_text())["test_text"]
    assert record["lowercase"] is False
    sets = {t["name"]: t for t in record["sets"]}
    assert sorted(sets) == [f"newstest{y}" for y in range(2010, 2017)]
    assert (sets["newstest2014"]["split"], sets["newstest2014"]["sacrebleu"]) == ("test", "-t wmt14/full -l en-de")
    assert sets["newstest2010"]["sacrebleu"] == "-t wmt10 -l en-de"
    for name, test in sets.items():
        assert test["files"]["de"]["lines"] == wmt.expected["tests"][name], name
    assert lines(wmt.out / "test-text" / "newstest2014.en")[0].startswith("He says it\u2019s the")


def test_wmt_references_are_sacrebleus_own_wmt14_full_and_so_is_the_score(wmt, tmp_path):
    """``sacrebleu -t wmt14/full -l en-de`` on the fixture's test-full.tgz (in sacrebleu's folder, as a download
    leaves it): its references are the recorded text, and its score of the hypotheses is the harness's."""
    from fairseq_residual_tools.repro import scoring
    from fairseq_residual_tools.repro.data_record import untouched_test_sets

    raw = tmp_path / "sacrebleu" / "wmt14" / "full" / "raw"
    raw.mkdir(parents=True)
    shutil.copy(wmt.mirror / "test-full.tgz", raw / "wmt14_full.test-full.tgz")
    with tarfile.open(raw / "wmt14_full.test-full.tgz") as tar:
        tar.extractall(raw, filter="data")
    env = dict(os.environ, SACREBLEU=str(tmp_path / "sacrebleu"))
    official = ["-t", "wmt14/full", "-l", "en-de"]
    assert sacrebleu_command(*official, "--echo", "ref", env=env).splitlines() == lines(
        wmt.out / "test-text" / "newstest2014.de"
    )
    assert sacrebleu_command(*official, "--echo", "src", env=env).splitlines() == lines(
        wmt.out / "test-text" / "newstest2014.en"
    )
    untouched = {u.name: u for u in untouched_test_sets(wmt.out / "bin", "en", "de").values()}
    splits = json.loads((wmt.out / "bin" / "test_splits.json").read_text())
    prefix = {name: "test" if name == "newstest2014" else name for name in splits.values()}
    generations = {name: generation_of(lines(wmt.out / "text" / f"{prefix[name]}.de")) for name in untouched}
    scores = scoring.score_wmt(generations, untouched, "de")
    hypotheses = tmp_path / "hyp"
    newstest2014 = scoring.detokenize(generations["newstest2014"].hypotheses, "de")
    hypotheses.write_text("".join(x + "\n" for x in newstest2014), encoding="utf-8")
    command = sacrebleu_command(*official, "-i", hypotheses, "-b", "-w", "2", env=env)
    assert scores["test_sets"]["newstest2014"]["sacrebleu"] == float(command) < 100.0  # ’ is not '
    assert scores["test_sets"]["newstest2014"]["bleu"] == 100.0  # the tokenised, compound-split second figure
    assert scores["sacrebleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")


def test_fairseq_loads_the_wmt_data_bin_with_every_test_split(wmt):
    splits = json.loads((wmt.out / "bin" / "test_splits.json").read_text())
    for split, name in splits.items():
        assert len(load_translation(wmt.out / "bin", "en", "de", split)) == wmt.expected["tests"][name]
    assert len(load_translation(wmt.out / "bin", "de", "en", "train")) == wmt.expected["train"]


# ---------------------------------------------------------------- OPUS-100


@pytest.fixture(scope="session")
def opus(tmp_path_factory):
    root = tmp_path_factory.mktemp("opus")
    archives, sizes = build_opus(root / "mirror")
    checksums = write_checksums(root / "checksums.json", archives)
    out = root / "out"
    proc = ok(
        run_script(
            "opus100",
            ["--out", out, "--checksums", checksums, "--langs", "de,fr,yo", "--spm-vocab", 150, "--workers", 2],
            env={"OPUS100_BASE_URL": f"file://{root / 'mirror'}"},
        )
    )
    return SimpleNamespace(out=out, sizes=sizes, proc=proc, checksums=checksums)


def test_opus_sizes_language_lists_and_train_only_pairs(opus):
    text = opus.out / "text"
    for pair_name, splits in opus.sizes.items():
        for split, n in splits.items():
            for lang in pair_name.split("-"):
                assert len(lines(text / f"{ {'dev': 'valid'}.get(split, split) }.{pair_name}.{lang}")) == n
    assert not (text / "valid.en-yo.yo").exists()  # yo-en has no dev/test in OPUS-100 v1.0
    bin_ = opus.out / "bin"
    assert lines(bin_ / "langs.txt") == ["de,en,fr,yo"]
    assert lines(bin_ / "lang_pairs.txt") == ["en-de,de-en,en-fr,fr-en"]
    assert lines(bin_ / "train_only_lang_pairs.txt") == ["en-yo,yo-en"]
    assert len({(bin_ / f"dict.{l}.txt").read_text() for l in ("de", "en", "fr", "yo")}) == 1


def test_opus_sentencepiece_is_applied_and_reversible(opus):
    pieces = lines(opus.out / "text" / "train.de-en.de")
    raw = lines(opus.out / "orig" / "de-en" / "opus.de-en-train.de")
    assert any(len(p.split()) > len(r.split()) for p, r in zip(pieces, raw))
    assert ["".join(p.split()).replace("\u2581", " ").strip() for p in pieces] == raw
    de = ids(opus.out / "text" / "test.de-en.de", decode=lambda x: "".join(x.split()).replace("\u2581", " "))
    en = ids(opus.out / "text" / "test.de-en.en", decode=lambda x: "".join(x.split()).replace("\u2581", " "))
    assert de == en


def test_opus_keeps_the_releases_test_files_for_every_pair_with_a_test_set(opus):
    record = json.loads((opus.out / "summary.json").read_text())["test_text"]
    assert record["lowercase"] is False
    assert [(t["split"], t["name"], sorted(t["files"])) for t in record["sets"]] == [
        ("test", "test.de-en", ["de", "en"]),
        ("test", "test.en-fr", ["en", "fr"]),
    ]  # yo-en has no test set
    for lang in ("de", "en"):
        assert (opus.out / "test-text" / f"test.de-en.{lang}").read_bytes() == (
            opus.out / "orig" / "de-en" / f"opus.de-en-test.{lang}"
        ).read_bytes()


def test_fairseq_multilingual_task_loads_the_opus_data_bin(opus):
    from fairseq import options, tasks

    bin_ = opus.out / "bin"
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            str(bin_),
            "--task",
            "translation_multi_simple_epoch",
            "--arch",
            "transformer",
            "--cpu",
            "--langs",
            lines(bin_ / "langs.txt")[0],
            "--lang-pairs",
            lines(bin_ / "lang_pairs.txt")[0],
            "--encoder-langtok",
            "tgt",
            "--sampling-method",
            "temperature",
            "--sampling-temperature",
            "5",
            "--max-source-positions",
            "256",
            "--max-target-positions",
            "256",
        ],
    )
    task = tasks.setup_task(args)
    task.load_dataset("valid")
    assert len(task.dataset("valid")) == 4 * 12  # en<->de and en<->fr valid pairs
    task.load_dataset("train", epoch=1)
    assert len(task.dataset("train")) > 0


def test_opus_unknown_language_is_a_one_line_error(opus, capsys):
    from fairseq_residual_tools.dataprep import opus100

    assert opus100.main(["--langs", "de,xx", "--checksums", str(opus.checksums), "--out", "unused", "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no OPUS-100 pair with English for xx")


# ---------------------------------------------------------------- custom corpus


@pytest.fixture(scope="session")
def custom_corpus(tmp_path_factory):
    import random

    root = tmp_path_factory.mktemp("custom")
    rng = random.Random(4)
    splits = {"train": range(1, 301), "valid": range(1001, 1021), "test": range(2001, 2021)}
    for split, idents in splits.items():
        rows = [pair(i, rng, langs=("de", "en")) for i in idents]
        write_parallel(root / "raw" / split, rows, ("de", "en"))
    return root


def test_custom_corpus_bpe_pipeline_through_the_script(custom_corpus):
    out = custom_corpus / "out-bpe"
    raw = custom_corpus / "raw"
    ok(
        run_script(
            "custom",
            [
                "--train-prefix",
                raw / "train",
                "--valid-prefix",
                raw / "valid",
                "--test-prefix",
                raw / "test",
                "--src",
                "de",
                "--tgt",
                "en",
                "--out",
                out,
                "--bpe-merges",
                150,
                "--workers",
                2,
            ],
        )
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pairs"] == {"train": 300, "valid": 20, "test": 20}
    assert summary["test_text"]["lowercase"] is False and len(summary["test_text"]["sets"]) == 1
    for lang in ("de", "en"):  # the test files as given
        assert (out / "test-text" / f"test.{lang}").read_bytes() == (raw / f"test.{lang}").read_bytes()
    assert ids(out / "text" / "test.de") == list(range(2001, 2021)) == ids(out / "text" / "test.en")
    assert sum("@@ " in x for x in lines(out / "text" / "train.en")) > 0
    assert len(load_translation(out / "bin", "en", "de", "valid")) == 20


def test_custom_corpus_sentencepiece_pipeline(custom_corpus, tmp_path):
    from fairseq_residual_tools.dataprep import custom

    raw = custom_corpus / "raw"
    out = tmp_path / "out"
    assert (
        custom.main(
            [
                "--train-prefix",
                str(raw / "train"),
                "--valid-prefix",
                str(raw / "valid"),
                "--src",
                "de",
                "--tgt",
                "en",
                "--out",
                str(out),
                "--subword",
                "sentencepiece",
                "--spm-vocab",
                "100",
                "--workers",
                "1",
                "--quiet",
            ]
        )
        == 0
    )
    decoded = ["".join(x.split()).replace("\u2581", " ").strip() for x in lines(out / "text" / "valid.en")]
    assert decoded == lines(raw / "valid.en")
    assert (out / "bin" / "valid.de-en.de.bin").exists() and not (out / "bin" / "test.de-en.de.bin").exists()
    assert json.loads((out / "summary.json").read_text())["test_text"] == {"lowercase": False, "sets": []}
    # the recorded settings: fairseq's own sentencepiece bpe (what load_translator and fairseq-interactive
    # use) with the recorded model encodes raw text as data prep did, and decodes back to it
    from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE, SentencepieceConfig

    record = json.loads((out / "summary.json").read_text())["translation"]
    assert record["tokenizer"] is None and record["bpe"] == "sentencepiece" and record["lowercase"] is False
    assert record["fairseq_interactive_flags"].endswith(
        f"--sentencepiece-model {(out / 'text' / 'spm.model').resolve()}"
    )
    bpe = SentencepieceBPE(SentencepieceConfig(sentencepiece_model=str(out / record["sentencepiece_model"])))
    assert [bpe.encode(x) for x in lines(raw / "valid.de")] == lines(out / "text" / "valid.de")
    assert [bpe.decode(x) for x in lines(out / "text" / "valid.en")] == lines(raw / "valid.en")


def test_custom_rerun_with_other_options_redoes_what_they_change(custom_corpus, tmp_path, capsys):
    from fairseq_residual_tools.dataprep import custom

    raw, out = custom_corpus / "raw", tmp_path / "out"
    base = ["--train-prefix", str(raw / "train"), "--valid-prefix", str(raw / "valid"), "--src", "de", "--tgt", "en"]
    base += ["--out", str(out), "--workers", "1", "--quiet"]
    assert custom.main(base + ["--bpe-merges", "150"]) == 0
    assert len(lines(out / "text" / "code")) == 151  # a version line, then the merges
    assert any(x != x.lower() for x in lines(out / "text" / "train.en"))
    capsys.readouterr()

    # the case: the same OUT with other options used to skip every stage
    assert custom.main(base + ["--lowercase", "--bpe-merges", "50"]) == 0
    assert "redo  tokenize.train.de and every later stage: option lowercase was False, now True" in (
        capsys.readouterr().out
    )
    assert len(lines(out / "text" / "code")) == 51
    assert all(x == x.lower() for x in lines(out / "text" / "train.en") + lines(out / "text" / "valid.de"))
    options = json.loads((out / "summary.json").read_text())["options"]
    assert options["lowercase"] is True and options["bpe_merges"] == 50 and options["max_len"] == 250
    dictionary = (out / "bin" / "dict.en.txt").read_text()
    assert not any(w != w.lower() for w in dictionary.split()[::2])  # the data-bin was rebuilt from it

    # only BPE changes: tokenisation is kept, BPE and everything after it redone
    stages = custom.prepare(custom.build_parser().parse_args(base + ["--lowercase", "--bpe-merges", "80"]))
    assert all(s.startswith("tokenize.") or s == "clean.train" for s in stages.skipped)
    assert stages.ran[0] == "learn-bpe" and stages.ran[-2:] == ["binarise", "summary"]
    assert len(lines(out / "text" / "code")) == 81


@pytest.mark.parametrize("problem", ["missing", "mismatch", "empty", "same-language", "not-utf8"])
def test_custom_corpus_bad_input_is_one_line_naming_the_file(problem, custom_corpus, tmp_path, capsys):
    from fairseq_residual_tools.dataprep import custom

    raw = tmp_path / "raw"
    shutil.copytree(custom_corpus / "raw", raw)
    src, tgt, expected = "de", "en", ""
    if problem == "missing":
        (raw / "valid.en").unlink()
        expected = f"error: missing file {raw / 'valid.en'}"
    elif problem == "mismatch":
        with open(raw / "train.de", "a") as f:
            f.write("Eine Zeile mehr.\n")
        expected = f"error: line counts differ: {raw / 'train.de'} has 301 lines, {raw / 'train.en'} has 300"
    elif problem == "empty":
        (raw / "valid.de").write_text("")
        (raw / "valid.en").write_text("")
        expected = f"error: empty corpus: {raw / 'valid.de'} has no lines"
    elif problem == "not-utf8":
        text = (raw / "train.de").read_bytes().split(b"\n")
        text[6] = "Grüße aus Köln.".encode("latin-1")
        (raw / "train.de").write_bytes(b"\n".join(text))
        expected = f"error: {raw / 'train.de'} line 7 is not UTF-8 (byte 0xfc at column 3)"
    else:
        tgt = "de"
        expected = "error: --src and --tgt are both 'de'"
    rc = custom.main(
        [
            "--train-prefix",
            str(raw / "train"),
            "--valid-prefix",
            str(raw / "valid"),
            "--src",
            src,
            "--tgt",
            tgt,
            "--out",
            str(tmp_path / "out"),
            "--workers",
            "2",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and err[0].startswith(expected), err
    assert not (tmp_path / "out" / "bin").exists()
