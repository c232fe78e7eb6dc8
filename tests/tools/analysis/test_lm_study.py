"""The LM CPU study (analysis/lm_study.py) and its text (dataprep/pydoc_text.py): the split rule, a reduced study
end to end through fairseq-train and fairseq-eval-lm, exact reuse, and its errors."""

import json
import math
import time

import pytest
from helpers import commit_during_training

from fairseq_residual.schemes import SCHEMES
from fairseq_residual_tools.analysis import lm_study
from fairseq_residual_tools.dataprep import pydoc_text
from fairseq_residual_tools.errors import DataError

#: two schemes, one depth, a tiny width, 16 updates on the manual's first 200 paragraphs: the pipeline only
REDUCED = ["--schemes", "post", "residual", "--depths", "2", "--seeds", "1", "--dim", "16", "--max-update", "16"]
REDUCED += ["--warmup", "4", "--lr", "5e-3", "--validate-every", "8", "--log-interval", "2"]
REDUCED += ["--paragraphs", "200", "--bpe-merges", "100", "--loss-at", "8", "16"]


def test_paragraph_j_goes_to_valid_at_18_and_test_at_19_of_every_20(tmp_path):
    topics = {"b": "\n\n".join(f"b{j}  line\n  two" for j in range(30)), "a": "\n\n".join(f"a{j}" for j in range(12))}
    record = pydoc_text.write_text_files(tmp_path, topics=topics)
    # topic a first (sorted names), each paragraph's lines joined by single spaces
    order = [f"a{j}" for j in range(12)] + [f"b{j} line two" for j in range(30)]
    lines = {s: (tmp_path / f"{s}.txt").read_text().splitlines() for s in pydoc_text.SPLITS}
    assert lines["valid"] == [order[18], order[38]] and lines["test"] == [order[19], order[39]]
    assert lines["train"] == [p for j, p in enumerate(order) if j % 20 < 18]
    assert record["lines"] == {"train": 38, "valid": 2, "test": 2} and record["paragraphs"] == 42
    assert json.loads((tmp_path / "record.json").read_text())["sha256"] == record["sha256"]
    with pytest.raises(DataError, match="--paragraphs 5 leaves a split empty"):
        pydoc_text.write_text_files(tmp_path, limit=5, topics=topics)


def test_writing_the_same_text_again_leaves_the_files_alone(tmp_path):
    # the data recipe redoes every stage after an input whose time changed: a re-run of a study prepared it all again
    topics = {"a": "\n\n".join(f"a{j}" for j in range(40))}
    pydoc_text.write_text_files(tmp_path, topics=topics)
    times = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    time.sleep(0.01)
    pydoc_text.write_text_files(tmp_path, topics=topics)
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == times
    pydoc_text.write_text_files(tmp_path, topics={"a": "\n\n".join(f"b{j}" for j in range(40))})
    assert all(p.stat().st_mtime_ns != times[p.name] for p in tmp_path.iterdir())


def test_the_default_text_is_the_installed_pythons_manual(tmp_path):
    from pydoc_data.topics import topics

    record = pydoc_text.write_text_files(tmp_path, limit=40)
    first = " ".join(topics[sorted(topics)[0]].split("\n\n")[0].split())
    assert (tmp_path / "train.txt").read_text().splitlines()[0] == first
    assert record["lines"] == {"train": 36, "valid": 2, "test": 2}


def cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    work, out = tmp_path_factory.mktemp("lm-work"), tmp_path_factory.mktemp("lm-out")
    argv = REDUCED + ["--work", str(work), "--out", str(out)]
    return argv, work, out, lm_study.study(argv)


@pytest.mark.slow
def test_a_reduced_study_trains_scores_and_reports_each_scheme(reduced):
    argv, work, out, results = reduced
    assert [(r["scheme"], r["layers"], r["seed"]) for r in results] == [("post", 2, 1), ("residual", 2, 1)]
    for r in results:
        assert r["fails"] is None and r["train_curve"][-1][0] == 16
        assert r["test_ppl"] == pytest.approx(2 ** r["test_loss"], rel=1e-3)  # eval-lm's loss is base 2
        assert 10 < r["test_ppl"] < 1000  # learned something of a few hundred BPE types, not uniform
        assert (
            "--task language_modeling" in r["train_command"]
            and "--residual-scheme " + r["scheme"] in r["train_command"]
        )
    readme = (out / "README.md").read_text()
    assert (
        "not a paper figure" in readme
        and "python -m fairseq_residual_tools.analysis.lm_study " + " ".join(argv) in readme
    )
    ppl_rows = [line for line in readme.split("## Final validation loss")[0].splitlines() if line.startswith("| post")]
    assert len(ppl_rows) == 1 and f"| {results[0]['test_ppl']:.1f} " in ppl_rows[0]  # one seed: no "± 0.0"
    record = json.loads((out / "results.json").read_text())
    assert record["data"]["paragraphs"] == 200 and len(record["data"]["sha256_bin"]) == 64
    # --loss-at: the validation loss of each run at updates 8 and 16, read off its curve
    at = readme.split("## Validation loss at updates 8, 16")[1].split("\n## ")[0].splitlines()
    header, residual = (cells(line) for line in at if line.startswith(("| scheme", "| residual")))
    assert header == ["scheme", "2 layers @ 8", "2 layers @ 16"]
    curve = dict(results[1]["valid_curve"])
    assert residual == ["residual", f"{curve[8]:.3f}", f"{curve[16]:.3f}"]
    for png in ("train_loss.png", "valid_loss.png"):
        assert (out / png).stat().st_size > 10_000


@pytest.mark.slow
def test_a_rerun_trains_nothing_and_a_changed_setting_trains_anew(reduced, capsys):
    argv, work, out, first = reduced
    folders = sorted(p.name for p in (work / "runs").iterdir())
    stamps = {p: p.stat().st_mtime_ns for p in (work / "runs").glob("*/train.out")}
    capsys.readouterr()
    again = lm_study.study(argv)
    assert "nothing to train" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert [r["test_ppl"] for r in again] == [r["test_ppl"] for r in first]
    changed = lm_study.study([*argv, "--schemes", "post", "--max-update", "12"])
    assert "nothing to train" not in capsys.readouterr().out
    assert changed[0]["train_curve"][-1][0] == 12
    now = sorted(p.name for p in (work / "runs").iterdir())
    assert len(now) == 3 and set(folders) < set(now)  # the 16-update runs are kept beside the new one


@pytest.mark.slow
def test_a_run_killed_after_training_is_scored_without_training_more(reduced):
    argv, work, out, first = reduced
    (run_dir,) = (work / "runs").glob("residual-l2-seed1-*")
    (run_dir / "result.json").unlink()  # as after a SIGKILL between fairseq-train's end and the score
    checkpoint = (run_dir / "checkpoint_last.pt").stat().st_mtime_ns
    again = {r["name"]: r for r in lm_study.study([*argv, "--schemes", "residual"])}["residual-l2-seed1"]
    assert not again["reused"] and again["train_curve"][-1][0] == 16  # fairseq's finished training: no update more
    assert (run_dir / "checkpoint_last.pt").stat().st_mtime_ns == checkpoint
    assert again["test_ppl"] == next(r["test_ppl"] for r in first if r["scheme"] == "residual")


def test_an_unknown_scheme_is_one_line_naming_the_choices(tmp_path, capsys):
    status = lm_study.main(["--schemes", "post", "resdual", "--work", str(tmp_path), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 1 and err.count("\n") == 1
    assert err.startswith("error: unknown scheme(s) resdual: --schemes takes ") and ", ".join(SCHEMES) in err
    assert not any(tmp_path.iterdir())  # nothing prepared, nothing written


def test_the_updates_to_reach_a_loss_are_the_first_validation_point_at_or_below_it():
    def run(seed, curve, fails=None):
        return dict(scheme="pre", layers=6, seed=seed, valid_curve=curve, fails=fails)

    runs = [run(1, [[50, 8.0], [100, 7.0], [150, 6.4]]), run(2, [[50, 7.9], [100, 6.5], [150, 6.3]])]
    assert [lm_study.updates_to_reach(r, 6.5) for r in runs] == [150, 100]
    assert lm_study.reach_cell(runs, 6.5) == "125 ± 25"
    assert lm_study.reach_cell(runs, 6.35) == "150 (1/2 not reached)"
    assert lm_study.reach_cell(runs, 5.0) == "2/2 not reached"
    assert lm_study.reach_cell([run(1, [[50, 9.0]], fails="stuck on a plateau"), runs[1]], 6.5) == "100 (1/2 fail)"
    lines = lm_study.reach_section(runs, [6.5]).splitlines()
    assert [cells(lines[2]), cells(lines[4])] == [["scheme", "6 layers, loss <= 6.5"], ["pre", "125 ± 25"]]


def test_the_zoom_adds_a_panel_of_the_late_validation_points_on_its_own_scale(tmp_path):
    from matplotlib.image import imread

    def run(scheme, seed, curve):
        train = [[u, v + 0.5] for u, v in curve]
        return dict(scheme=scheme, layers=6, seed=seed, valid_curve=curve, train_curve=train, fails=None)

    results = [run("pre", 1, [[50, 9.0], [500, 6.0], [1000, 5.6]]), run("residual", 1, [[50, 9.4], [500, 6.3]])]
    panels = lm_study.curve_panels(results, ".", zoom_from=500)
    assert list(panels) == ["6 layers", "6 layers, from update 500"]
    assert [r["valid_curve"] for r, _, _ in panels["6 layers, from update 500"]] == [
        [[500, 6.0], [1000, 5.6]],
        [[500, 6.3]],
    ]
    assert [r["valid_curve"] for r, _, _ in panels["6 layers"]] == [r["valid_curve"] for r in results]  # untouched
    assert list(lm_study.curve_panels(results, ".")) == ["6 layers"]
    lm_study.plot_curves(results, tmp_path, zoom_from=500)
    valid, train = (imread(tmp_path / f"{c}_loss.png").shape for c in ("valid", "train"))
    assert valid[0] == train[0] and valid[1] == 2 * train[1]  # two panels side by side; the training plot keeps one


def test_a_run_records_the_tree_its_training_started_from_not_the_one_it_ended_on(tmp_path, monkeypatch):
    now = commit_during_training(monkeypatch, lm_study)
    run = lm_study.LMRun("pre", 2, 1)
    data = {"databin": str(tmp_path / "bin"), "sha256_bin": "0" * 64, "fingerprints": {run: "fp"}}
    result = lm_study.run_one(run, data, lm_study.parse_args([]), tmp_path / "runs")
    assert now["tree"]["commit"] == "b" * 40 and result["git"] == "aaaaaaa"
    saved = json.loads(next((tmp_path / "runs").glob("*/result.json")).read_text())
    assert saved["git"] == "aaaaaaa"


def test_every_registered_scheme_is_in_the_default_grid():
    runs = lm_study.grid(list(SCHEMES), [6, 12], [1, 2])
    assert len(runs) == 4 * len(SCHEMES) and runs[0] == lm_study.LMRun("post", 6, 1)
    assert len({r.name for r in runs}) == len(runs)


def test_a_runs_key_changes_with_its_command_its_data_and_its_models_fingerprint_only():
    settings = lm_study.parse_args([])
    run = lm_study.LMRun("residual", 6, 1)
    key = lm_study.run_key(run, settings, "a" * 64, "fp")
    assert key == lm_study.run_key(run, lm_study.parse_args(["--jobs", "1", "--work", "/elsewhere"]), "a" * 64, "fp")
    assert key != lm_study.run_key(run, lm_study.parse_args(["--lr", "1e-3"]), "a" * 64, "fp")
    assert key != lm_study.run_key(run, settings, "b" * 64, "fp")
    assert key != lm_study.run_key(lm_study.LMRun("residual", 6, 2), settings, "a" * 64, "fp")
    assert key != lm_study.run_key(run, settings, "a" * 64, "other code")
    assert math.isfinite(len(key)) and len(key) == 12
