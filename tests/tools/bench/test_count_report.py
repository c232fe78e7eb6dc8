"""``fairseq-residual-bench --counts-only`` counts every chosen variant, writes counts.json and counts.md with the
command and provenance, and reports each scheme's measured extra work against its formula."""

import dataclasses
import json

import pytest
import torch

from fairseq_residual_tools import provenance
from fairseq_residual_tools.bench import cli, count_report, counts
from fairseq_residual_tools.bench.variants import TINY

ARGV = ["--counts-only", "--sizes", "tiny", "--schemes", "pre,residual", "--threads", "1"]
#: a clean checkout at a made-up commit: a finished count is then not redone
CLEAN = {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False}


def on_a_clean_checkout(monkeypatch):
    monkeypatch.setattr(provenance, "git_state", lambda: CLEAN)
    monkeypatch.setattr(count_report, "git_state", lambda: CLEAN)


@pytest.fixture(scope="module")
def out(tmp_path_factory, one_torch_thread):
    out = tmp_path_factory.mktemp("counts")
    with pytest.MonkeyPatch.context() as monkeypatch:
        on_a_clean_checkout(monkeypatch)
        cli.main([*ARGV, "--out", str(out)])
    return out


@pytest.fixture(scope="module")
def written(out):
    return json.loads((out / "counts.json").read_text()), (out / "counts.md").read_text()


def test_counts_json_holds_the_command_provenance_and_every_variant(written):
    record, _ = written
    assert record["command"] == "fairseq-residual-bench " + " ".join([*ARGV, "--out", record["command"].split()[-1]])
    assert record["versions"]["torch"] == torch.__version__ and record["git"] == CLEAN
    (size,) = record["sizes"]
    assert list(size["variants"]) == ["stock-post", "stock-pre", "pre", "residual"]
    assert size["shapes"] == {
        "B": 4,
        "S": 7,
        "T": 6,
        "d": 16,
        "F": 32,
        "H": 2,
        "N": 2,
        "M": 2,
        "G": 2,
        "K": 5,
        "L": 5,
        "n": 4,
    }
    train = size["variants"]["residual"]["train"]
    assert train["ops"] == sum(k["ops"] for k in train["by_kind"].values()) and train["saved_bytes"] > 0
    # ResiDual over Pre-LN, the plugin's Pre-LN over stock's: in training and in generation
    assert [(r["scheme"], r["base"], r["phase"]) for r in size["overhead"]] == [
        ("residual", "pre", "train"),
        ("residual", "pre", "generate"),
        ("pre", "stock-pre", "train"),
        ("pre", "stock-pre", "generate"),
    ]
    assert all(r["minus"]["ops"] == r["minus"]["bytes"] == 0 for r in size["overhead"])
    assert record["formulas"]["residual"] == "pre"


def test_counts_md_shows_measured_minus_formula_and_residual_against_stock_pre_ln(written):
    record, text = written
    assert text == count_report.markdown(record)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    residual = [r for r in rows if r[:3] == ["residual", "pre", "train"]]
    assert len(residual) == 1 and residual[0][3] == "+26" and residual[0][-1] == "0"
    stock = [r for r in rows if r[:2] == ["tiny", "generate"]]
    assert len(stock) == 1 and stock[0][3].startswith("+47 (")  # 48 adds and copies, one host read fewer
    assert "fairseq-residual-bench --counts-only" in text and torch.__version__ in text


def test_a_finished_count_run_again_on_the_same_code_does_nothing(out, written, monkeypatch, capsys):
    before = (out / "counts.json").stat().st_mtime_ns
    on_a_clean_checkout(monkeypatch)
    cli.main([*ARGV, "--out", str(out)])
    assert (
        capsys.readouterr().out
        == f"{out / 'counts.json'} already holds these counts, made at commit 0123456: nothing to do\n"
    )
    assert (out / "counts.json").stat().st_mtime_ns == before and not (out / count_report.PARTIAL).exists()


def test_an_interrupted_count_resumes_from_the_variants_it_had_counted(tmp_path, monkeypatch, one_torch_thread):
    size, real = dataclasses.replace(TINY, schemes=("pre",)), counts.step_counts
    made = []

    def interrupted_after_one(size, variant):
        if made:
            raise KeyboardInterrupt
        made.append(variant.name)
        return real(size, variant)

    monkeypatch.setattr(counts, "step_counts", interrupted_after_one)
    with pytest.raises(KeyboardInterrupt):
        count_report.run([size], "c", tmp_path, log=lambda m: None)
    assert made == ["stock-post"] and (tmp_path / count_report.PARTIAL).exists()
    monkeypatch.setattr(counts, "step_counts", real)
    log = []
    record = count_report.run([size], "c", tmp_path, log=log.append)
    assert log[0] == f"[tiny] stock-post (1/3): counted before, kept from {tmp_path / count_report.PARTIAL}"
    assert [line.split(" ")[2] for line in log[1:]] == ["stock-pre", "pre"]
    assert record["sizes"][0]["variants"]["stock-post"]["train"] == real(size, "stock-post")["train"]
    count_report.write(record, tmp_path)
    assert not (tmp_path / count_report.PARTIAL).exists()
