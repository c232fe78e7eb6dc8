"""``bible_study --reuse``: a planned run reported from another study's record (``bible_reuse``), and the reading's
comparisons of the paper's baselines."""

import json
import shutil

import pytest
from test_bible_study import faked_study, recipe_test_text, table_rows  # noqa: F401 (an autouse fixture)

from fairseq_residual_tools.analysis import bible_reading, bible_report, bible_study
from fairseq_residual_tools.errors import ConfigError, DataError

PRE = "pre-e6d6-warmup-seed1"


def first_study(tmp_path):
    """The first study's Pre-LN E6D6 run under fairseq's criterion (it plateaus at 2,500): its record's path."""
    first = tmp_path / "first"
    bible_study.main(
        [*common(tmp_path), "--out", str(first), "--schemes", "pre", "--depths", "6", "--seeds", "1", "--jobs", "1"]
    )
    (record,) = (first / "runs").glob(f"{PRE}-*.json")
    return record


def common(tmp_path):
    return ["--work", str(tmp_path / "w"), "--plateau-min-updates", "1000", "--nowarmup-schemes"]


def paper_table(tmp_path, *more):
    """The plan of Pre-LN and DeepNet at E6D6 with the fused loss and a budget of 2,500 updates."""
    argv = [*common(tmp_path), "--out", str(tmp_path / "table"), "--criterion", "fused", "--budget", "6=2500"]
    argv += ["--schemes", "pre", "deepnet", "--groups", "6:1", "--jobs", "1"]
    return bible_study.main([*argv, *more])


def test_a_reused_record_is_reported_as_its_planned_run_and_not_trained_and_the_baseline_is_tested_against_it(
    tmp_path, monkeypatch
):
    trainer = faked_study(monkeypatch)
    record = first_study(tmp_path)
    assert len(trainer.targets) == 10  # the first study: 250 ... 2500
    results = paper_table(tmp_path, "--reuse", f"{PRE}={record}")
    assert len(trainer.targets) == 20  # DeepNet only: Pre-LN is the first study's run
    pre, deepnet = results
    assert (pre["name"], deepnet["name"]) == (PRE, "deepnet-e6d6-warmup-seed1")
    assert pre["reused_from"] == str(record) and pre["criterion"] == "label_smoothed_cross_entropy"
    assert (pre["stop"], pre["stop_where_trained"], pre["end_update"]) == ("budget of 2500 updates", "plateau", 2500)
    assert (pre["budget"], pre["plateau_update"], pre["best_valid_loss_at_plateau"]) == (2500, 2500, 4.24)
    assert "--criterion fused_label_smoothed_cross_entropy" in deepnet["train_command"]
    table = tmp_path / "table"
    # its translations beside this study's records under its planned name: the test reads them as any other run's
    assert (table / "runs" / f"{PRE}-{pre['key']}.test.detok").read_text() == record.with_suffix(
        ".test.detok"
    ).read_text()
    readme = (table / "README.md").read_text()
    assert (
        f"**Reused, not trained here** (the same recipe, seed and model, ending at this plan's budget): `{PRE}` from"
        in readme
    )
    rows = table_rows(readme)
    assert ["1", PRE, "reused: ended at update 2500: budget of 2500 updates", "4.240", "0.23%"] in rows
    assert any(row[3:5] == ["deepnet", "pre"] for row in rows)  # the significance table: DeepNet against Pre-LN
    assert [r.get("reused_from") for r in json.loads((table / "results.json").read_text())["runs"]] == [
        str(record),
        None,
    ]
    assert "pre-e6d6-warmup-seed1 reused from another study's records" in bible_report.published_block(
        json.loads((table / "results.json").read_text())
    )
    assert len(paper_table(tmp_path, "--reuse", f"{PRE}={record}")) == 2 and len(trainer.targets) == 20  # nothing left

    fresh = paper_table(tmp_path)  # without --reuse the plan trains its own Pre-LN, with the fused loss
    assert len(trainer.targets) == 30 and "reused_from" not in fresh[0]


def test_a_record_that_is_not_the_planned_run_is_refused_in_one_line_that_says_why(tmp_path, monkeypatch):
    faked_study(monkeypatch)
    record = first_study(tmp_path)
    refusals = {
        f"deepnet-e6d6-warmup-seed1={record}": "that record is another run (scheme pre",
        f"residual-e6d6-warmup-seed1={record}": "--reuse residual-e6d6-warmup-seed1: not a run of the plan",
        f"{PRE}={tmp_path / 'none.json'}": "no such record",
    }
    for reuse, message in refusals.items():
        with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
            paper_table(tmp_path, "--reuse", reuse)
    with pytest.raises(ConfigError, match="other fairseq-train arguments than the plan's"):
        paper_table(tmp_path, "--reuse", f"{PRE}={record}", "--dropout", "0.1")
    with pytest.raises(
        ConfigError,
        match="it ends at update 2500, not where this plan's budget ends it.*"
        "bible_extend --run pre-e6d6-warmup-seed1 --to 3000$",
    ):
        paper_table(tmp_path, "--reuse", f"{PRE}={record}", "--budget", "6=3000")
    monkeypatch.setattr(bible_study, "model_fingerprint", lambda train_args: "another model")
    with pytest.raises(ConfigError, match="today's code builds another model for it"):
        paper_table(tmp_path, "--reuse", f"{PRE}={record}")
    with pytest.raises(SystemExit):
        bible_study.parse_args(["--reuse", "pre-e6d6-warmup-seed1"])  # no record named
    (tmp_path / "cut.json").write_text(record.read_text()[:100])  # a record cut short
    with pytest.raises(DataError, match="cut.json: not a readable record"):
        paper_table(tmp_path, "--reuse", f"{PRE}={tmp_path / 'cut.json'}")
    (tmp_path / "other.json").write_text('{"name": "a bench record"}')
    with pytest.raises(DataError, match="other.json: not a study's run record \\(no scheme, layers"):
        paper_table(tmp_path, "--reuse", f"{PRE}={tmp_path / 'other.json'}")


def test_a_command_that_plans_another_depth_leaves_plan_args_reuse_aside_and_says_so(tmp_path, monkeypatch, capsys):
    """One E18D18 cell from ``@plan.args`` (whose --reuse names E6D6 runs) with ``--groups 18:1`` stopped at the reuse
    ("not a run of the plan") unless the command ended with an empty ``--reuse``."""
    trainer = faked_study(monkeypatch)
    record = first_study(tmp_path)
    capsys.readouterr()
    argv = [*common(tmp_path), "--out", str(tmp_path / "deep"), "--criterion", "fused", "--schemes", "pre"]
    argv += ["--jobs", "1", "--groups", "18:1", "--budget", "18=2500"]
    argv += ["--reuse", f"{PRE}={record}", "pre-e12d12-nowarmup-seed1=missing.json"]
    (deep,) = bible_study.main(argv)
    assert deep["name"] == "pre-e18d18-warmup-seed1" and "reused_from" not in deep and len(trainer.targets) == 20
    note = [line for line in capsys.readouterr().out.splitlines() if line.startswith("--reuse")]
    assert note == [
        f"--reuse {PRE}, pre-e12d12-nowarmup-seed1: runs of depth 6, 12, which this command does not plan: left aside"
    ]
    # a name at a planned depth that is not a planned run is still refused: a typo does not train for hours
    with pytest.raises(ConfigError, match="--reuse pre-e18d18-warmup-seed2: not a run of the plan"):
        bible_study.main([*argv, "pre-e18d18-warmup-seed2=x.json"])
    with pytest.raises(ConfigError, match="--reuse pre-e6d6-warmup: not a run of the plan"):
        bible_study.main([*argv, "pre-e6d6-warmup=x.json"])


def test_an_extensions_record_is_reused_with_the_recipe_of_the_run_it_extends_and_its_own_test_set(
    tmp_path, monkeypatch
):
    trainer = faked_study(monkeypatch)
    record = first_study(tmp_path)
    source = json.loads(record.read_text())
    extended = tmp_path / "first" / "extended"
    extended.mkdir()
    stem = f"{PRE}-to-3000-{source['key']}"
    curve = [*source["valid_curve"], [2750, 4.2], [3000, 4.19]]
    extension = {k: source[k] for k in ("scheme", "layers", "warmup", "seed", "key", "fails", "bleu", "sacrebleu")}
    extension.update(name=f"{PRE}-to-3000", extends=record.stem, end_update=3000, valid_curve=curve, stop="trained on")
    extension.update(best_valid_loss=4.19, train_seconds=1.0)
    (extended / f"{stem}.json").write_text(json.dumps(extension))
    (extended / f"{stem}.test.detok").write_text("the extension's translation\n" * 3)
    for name in (bible_report.REFERENCES, bible_report.CHAPTERS):
        shutil.copyfile(record.parent / name, extended / name)

    with pytest.raises(DataError, match=f"{stem}.test.detok holds 3 lines for 4 verses"):
        paper_table(tmp_path, "--budget", "6=3000", "--reuse", f"{PRE}={extended / stem}.json")
    (extended / f"{stem}.test.detok").write_text("the extension's translation\n" * 4)
    pre, _ = paper_table(tmp_path, "--budget", "6=3000", "--reuse", f"{PRE}={extended / stem}.json")
    assert (pre["end_update"], pre["stop"], pre["best_valid_loss"]) == (3000, "budget of 3000 updates", 4.19)
    assert len(trainer.targets) == 10 + 12  # DeepNet to 3,000 only
    copied = tmp_path / "table" / "runs" / f"{PRE}-{source['key']}.test.detok"
    assert copied.read_text() == "the extension's translation\n" * 4

    (extended / bible_report.CHAPTERS).write_text("Exodus 1\n" * 4)
    with pytest.raises(DataError, match="scored on another test set"):
        paper_table(tmp_path, "--budget", "6=3000", "--reuse", f"{PRE}={extended / stem}.json")
    (extended / f"{stem}.json").write_text(json.dumps(dict(extension, extends="pre-e6d6-warmup-seed1-000000000000")))
    with pytest.raises(DataError, match="extends pre-e6d6-warmup-seed1-000000000000, whose record .* is not there"):
        paper_table(tmp_path, "--budget", "6=3000", "--reuse", f"{PRE}={extended / stem}.json")


def test_the_papers_baselines_are_tested_against_pre_ln_and_residual():
    assert [tuple(bible_report.baselines(s)) for s in ("deepnet", "admin", "tfixup", "b2t", "dlcl")] == [
        ("pre", "residual")
    ] * 5
    assert tuple(bible_report.baselines("post")) == ("pre",) and tuple(bible_report.baselines("residual")) == (
        "pre",
        "post",
    )


def run(scheme, layers, bleu, fails=None):
    return {"scheme": scheme, "layers": layers, "warmup": True, "seed": 1, "bleu": bleu, "fails": fails}


def test_the_reading_says_whether_the_order_at_e6d6_holds_at_e18d18_and_leaves_the_failed_out():
    results = [
        run("post", 6, 33.4),
        run("pre", 6, 33.1),
        run("residual", 6, 33.5),
        run("deepnet", 6, 33.0),
        run("post", 18, None, fails="no progress"),
        run("pre", 18, 32.0),
        run("residual", 18, 33.2),
        run("deepnet", 18, 32.5),
    ]
    (said,) = bible_reading.order_reading(results)
    assert said.startswith(
        "**The order at E6D6 against E18D18, with warmup, seed 1** (by BLEU, best first; failed at either depth, "
        "left out: Post-LN): E6D6 ResiDual, Pre-LN, DeepNet; E18D18 ResiDual, DeepNet, Pre-LN: 1 of 3 pairs swap "
        "places: Pre-LN and DeepNet."
    )
    same = [r for r in results if r["scheme"] in ("residual", "pre")]
    assert "the same order" in bible_reading.order_reading(same)[0]
    assert bible_reading.order_reading([r for r in results if r["layers"] == 6]) == []  # one depth: nothing to say
