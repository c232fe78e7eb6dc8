"""The translation study trained to the plateau (``analysis.bible_study``): its plan, what names a run, training one
validation interval at a time until the plateau, the cap or a divergence, resuming, reusing finished records, and
the report. fairseq-train is replaced by a stand-in that writes fairseq's JSON log lines."""

import contextlib
import json
import subprocess
import sys
import threading
from argparse import Namespace
from dataclasses import asdict

import pytest
from sacrebleu.metrics import BLEU

from fairseq_residual_tools.analysis import bible_report, bible_study
from fairseq_residual_tools.analysis.study import RunSpec
from fairseq_residual_tools.errors import ConfigError, DataError
from fairseq_residual_tools.provenance import provenance
from fairseq_residual_tools.runner import RunError


def test_the_plan_trains_e6d6_seed_1_first_then_its_second_seed_and_the_deep_no_warmup_cells_last():
    specs = bible_study.plan(bible_study.parse_args([]))
    names = [s.name for s in specs]
    assert len(specs) == 30 and len(set(names)) == 30
    assert [s.layers for s in specs[:17]] == [6] * 17 and [s.seed for s in specs[:10]] == [1] * 10
    assert all(s.warmup for s in specs[:7]) and [s.name for s in specs[:7]][-2:] == [
        "siamese-e6d6-warmup-seed1",
        "attn-res-e6d6-warmup-seed1",
    ]
    assert [s.name for s in specs[7:10]] == [f"{x}-e6d6-nowarmup-seed1" for x in ("post", "pre", "residual")]
    assert all(s.warmup and s.seed == 2 for s in specs[10:17])  # the floor: two seeds at E6D6
    assert all(s.layers == 12 and s.seed == 1 for s in specs[17:27])  # one seed at E12D12 (--seeds-at 12=1)
    assert [s.warmup for s in specs[17:27]] == [True] * 7 + [False] * 3
    assert [s.name for s in specs[27:]] == [f"{x}-e6d6-nowarmup-seed2" for x in ("post", "pre", "residual")]
    one = bible_study.plan(bible_study.parse_args(["--schemes", "residual", "--depths", "6", "--seeds", "1"]))
    assert [s.name for s in one] == ["residual-e6d6-warmup-seed1", "residual-e6d6-nowarmup-seed1"]


def test_with_groups_the_plan_trains_each_depth_and_seed_in_the_order_given_with_its_own_schemes():
    args = bible_study.parse_args(
        ["--nowarmup-schemes", "--schemes", "post", "pre", "--schemes-at", "6=deepnet,admin", "12=tfixup"]
        + ["--groups", "6:1", "18:1", "6:2", "12:1", "--budget", "6=8750", "18=9000", "12=10000"]
    )
    names = [s.name for s in bible_study.plan(args)]
    assert names == [
        "deepnet-e6d6-warmup-seed1",
        "admin-e6d6-warmup-seed1",
        "post-e18d18-warmup-seed1",
        "pre-e18d18-warmup-seed1",
        "deepnet-e6d6-warmup-seed2",
        "admin-e6d6-warmup-seed2",
        "tfixup-e12d12-warmup-seed1",
    ]
    with pytest.raises(ConfigError, match="--budget has none for depth 18"):
        bible_study.parse_args(["--groups", "6:1", "18:1", "--budget", "6=8750"])


def test_a_runs_key_changes_with_what_it_computes_and_its_plateau_rule_only():
    spec, args = RunSpec("residual", 6, True, 1), bible_study.parse_args([])
    key = bible_study.run_key(spec, args, "d" * 64, "fp")
    same = ["--jobs", "1", "--work", "/x", "--out", "/y", "--zoom-from", "5", "--max-update-cap", "9000"]
    assert bible_study.run_key(spec, bible_study.parse_args(same), "d" * 64, "fp") == key
    others = (["--lr", "1e-3"], ["--dropout", "0.3"], ["--plateau-fraction", "0.02"], ["--average", "3"])
    for other in (*others, ["--criterion", "fused"]):
        assert bible_study.run_key(spec, bible_study.parse_args(other), "d" * 64, "fp") != key
    assert bible_study.run_key(spec, args, "e" * 64, "fp") != key
    assert bible_study.run_key(spec, args, "d" * 64, "other code") != key
    assert bible_study.run_key(RunSpec("residual", 6, False, 1), args, "d" * 64, "fp") != key


def test_the_criterion_is_fairseqs_unless_the_fused_one_is_asked_for():
    spec = RunSpec("pre", 6, True, 1)
    stock = bible_study.training_args("D", "S", spec, bible_study.parse_args([]), 250)
    fused = bible_study.training_args("D", "S", spec, bible_study.parse_args(["--criterion", "fused"]), 250)
    assert stock[stock.index("--criterion") + 1] == "label_smoothed_cross_entropy"  # the committed runs' keys
    assert fused[fused.index("--criterion") + 1] == "fused_label_smoothed_cross_entropy"


def test_without_warmup_inverse_sqrt_starts_at_the_peak():
    args = bible_study.parse_args([])
    with_warmup = bible_study.training_args("D", "S", RunSpec("pre", 6, True, 1), args, 250)
    without = bible_study.training_args("D", "S", RunSpec("pre", 6, False, 1), args, 250)
    at = with_warmup.index("--warmup-init-lr")
    assert with_warmup[at + 1] == "1e-07" and without[at + 1] == str(args.lr)
    assert [a for i, a in enumerate(with_warmup) if i != at + 1] == [a for i, a in enumerate(without) if i != at + 1]


class FakeTrainer:
    """fairseq-train: from the last update its log validated to the command's --max-update, a training line every 50
    updates and a validation every 250, the losses ``valid(update)``; ``kill_at``: stop there with a RunError."""

    def __init__(self, valid, kill_at=None, nan_at=None):
        self.valid, self.kill_at, self.nan_at, self.targets = valid, kill_at, nan_at, []

    def __call__(self, cmd, out_file, label, on_line=None):
        target = int(cmd[cmd.index("--max-update") + 1])
        self.targets.append(target)
        done = 0
        out_file.parent.mkdir(parents=True, exist_ok=True)
        if out_file.exists():
            done = max(
                [
                    0,
                    *(
                        json.loads(x[x.index("{") :])["valid_num_updates"]
                        for x in out_file.read_text().splitlines()
                        if "valid_loss" in x
                    ),
                ]
            )
        with open(out_file, "a") as log:
            log.write(f"$ {' '.join(cmd)}\n")
            for update in range(done + 50, target + 1, 50):
                stamp = f"2026-12-04 08:{update // 1000:02d}:{update % 60:02d} | INFO | train_inner | "
                if self.nan_at is not None and update >= self.nan_at:
                    log.write("FloatingPointError: Minimum loss scale reached\n")
                    return
                log.write(
                    stamp
                    + json.dumps(
                        {
                            "epoch": 1,
                            "update": 0.1,
                            "loss": self.valid(-(-update // 250) * 250) + 0.5,
                            "num_updates": update,
                        }
                    )
                    + "\n"
                )
                if update == self.kill_at:
                    self.kill_at = None
                    raise RunError(label, -9, "killed", out_file, "SIGKILL")
                if update % 250 == 0:
                    log.write(
                        stamp + json.dumps({"valid_loss": self.valid(update), "valid_num_updates": update}) + "\n"
                    )


#: a test set, tokenised and lowercased as the study's data (fairseq-generate's T- lines)
REFERENCES = [
    "and god said , let there be light : and there was light .",
    "in the beginning god created the heaven and the earth .",
    "and the evening and the morning were the first day .",
    "and god called the light day , and the darkness he called night .",
]


#: the same test verses as the modules give them (cased, untokenised), and their chapters: the recipe's test_text
ORIGINALS = [
    "And God said, Let there be light: and there was light.",
    "In the beginning God created the heaven and the earth.",
    "And the evening and the morning were the first day.",
    "And God called the light Day, and the darkness he called Night.",
]
TEST_TEXT = {"references": ORIGINALS, "documents": ["Genesis 1", "Genesis 1", "Genesis 2", "Genesis 3"]}


@pytest.fixture(autouse=True)
def recipe_test_text(monkeypatch):
    """The data prep's test_text record of the stand-in data-bin "D" (read from a real folder in its own test)."""
    monkeypatch.setattr(bible_study, "test_text", lambda databin: {**TEST_TEXT, "lowercase": True})


class FakeScoring:
    """average_and_score: writes the run's fairseq-generate output (``hypotheses`` against REFERENCES) where the
    study reads it and returns the scores with BLEU ``bleu(end_update)``."""

    def __init__(self, hypotheses=REFERENCES, bleu=lambda end: 12.5, references=REFERENCES):
        self.hypotheses, self.bleu, self.references = hypotheses, bleu, references

    def __call__(self, databin, save_dir, end_update, args):
        bleu = self.bleu(end_update)
        lines = [
            f"T-{i}\t{ref}\nH-{i}\t-0.5\t{hyp}\n" for i, (ref, hyp) in enumerate(zip(self.references, self.hypotheses))
        ]
        detail = f"BLEU4 = {bleu:.2f}, 50.0/30.0/20.0/10.0 (BP=1.000, ratio=1.000, syslen=40, reflen=40)"
        (save_dir / "generate-test.out").write_text("".join(lines) + f"Generate test with beam=5: {detail}\n")
        return {"bleu": bleu, "bleu_detail": detail, "sacrebleu": 11.0, "sacrebleu_signature": "sig"}


#: a validation curve whose best, 4.24 at 2000, is less than 1 % below the best of the first three quarters at 2500
PLATEAU_AT_2500 = {250: 8, 500: 6, 750: 5, 1000: 4.6, 1250: 4.4, 1500: 4.3, 1750: 4.25, 2000: 4.24, 2250: 4.26}


def plateau_curve(update):
    return PLATEAU_AT_2500.get(update, 4.3)


def table_rows(markdown):
    """The cells of every table row in ``markdown``, stripped."""
    return [[c.strip() for c in line.split("|")[1:-1]] for line in markdown.splitlines() if line.startswith("| ")]


def plan_entry(spec):
    """results.json's entry of ``spec`` in its "plan"."""
    return dict(asdict(spec), name=spec.name)


def study_args(tmp_path, *more):
    return bible_study.parse_args(
        ["--work", str(tmp_path / "w"), "--out", str(tmp_path / "o"), "--plateau-min-updates", "1000", *more]
    )


def test_it_trains_an_interval_at_a_time_until_the_first_validation_where_the_run_has_plateaued(tmp_path, monkeypatch):
    trainer, filled = FakeTrainer(plateau_curve), []
    monkeypatch.setattr(bible_study, "run_training", trainer)
    monkeypatch.setattr(bible_study, "fill_update_checkpoint", lambda folder, update: filled.append((folder, update)))
    stop = bible_study.train_to_end(RunSpec("pre", 6, True, 1), "D", tmp_path, study_args(tmp_path), "pre")
    assert stop == {"stop": "plateau", "end_update": 2500}
    assert trainer.targets == list(range(250, 2501, 250))
    # every interval leaves its update checkpoint, the one fairseq skips at an epoch's end included
    assert filled == [(tmp_path, t) for t in trainer.targets]


def test_a_killed_run_resumes_from_its_last_validation_and_ends_where_an_unbroken_one_does(tmp_path, monkeypatch):
    trainer, filled = FakeTrainer(plateau_curve, kill_at=650), []
    monkeypatch.setattr(bible_study, "run_training", trainer)
    monkeypatch.setattr(bible_study, "fill_update_checkpoint", lambda folder, update: filled.append(update))
    args, spec = study_args(tmp_path), RunSpec("pre", 6, True, 1)
    with pytest.raises(RunError):
        bible_study.train_to_end(spec, "D", tmp_path, args, "pre")
    assert filled == [250, 500]  # killed at 650: update 500's checkpoint is filled again when it resumes
    assert bible_study.train_to_end(spec, "D", tmp_path, args, "pre") == {"stop": "plateau", "end_update": 2500}
    assert trainer.targets == [250, 500, 750, 750, *range(1000, 2501, 250)]
    assert filled == [250, 500, 500, *range(750, 2501, 250)]


def test_a_run_that_never_plateaus_stops_at_the_cap_and_a_nan_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(bible_study, "run_training", FakeTrainer(lambda u: 10 - u / 1000))
    stop = bible_study.train_to_end(
        RunSpec("pre", 6, True, 1), "D", tmp_path / "a", study_args(tmp_path, "--max-update-cap", "1500"), "a"
    )
    assert stop == {"stop": "reached --max-update-cap 1500 before the plateau", "end_update": 1500}
    nan = FakeTrainer(lambda u: 10 - u / 1000, nan_at=600)
    monkeypatch.setattr(bible_study, "run_training", nan)
    stop = bible_study.train_to_end(RunSpec("post", 6, True, 1), "D", tmp_path / "b", study_args(tmp_path), "b")
    assert stop["stop"].startswith("diverged: loss became NaN") and nan.targets == [250, 500, 750]


def test_a_finished_run_is_recorded_under_its_key_and_reused_without_training(tmp_path, monkeypatch):
    trainer = FakeTrainer(plateau_curve)
    monkeypatch.setattr(bible_study, "run_training", trainer)
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring())
    args, spec = study_args(tmp_path), RunSpec("residual", 6, True, 1)
    data = {"databin": "D", "sha256": "d" * 64, "fingerprints": {spec: "fp"}}
    first = bible_study.run_one(spec, data, args, tmp_path / "records", tmp_path / "runs")
    key = bible_study.run_key(spec, args, "d" * 64, "fp")
    assert first["fails"] is None, first["fails"]
    assert not first["reused"] and first["bleu"] == 12.5 and first["end_update"] == 2500 and first["fails"] is None
    assert json.loads((tmp_path / "records" / f"{spec.name}-{key}.json").read_text())["key"] == key
    calls = len(trainer.targets)
    again = bible_study.run_one(spec, data, args, tmp_path / "records", tmp_path / "runs")
    assert again["reused"] and len(trainer.targets) == calls and again["bleu"] == 12.5
    other = {**data, "fingerprints": {spec: "changed code"}}
    assert not bible_study.run_one(spec, other, args, tmp_path / "records", tmp_path / "runs2")["reused"]

    results = [dict(first, scheme="residual")]
    meta = {
        "command": "cmd",
        "plan": [plan_entry(spec)],
        "settings": {k: v for k, v in vars(args).items() if k not in ("work", "out")},
        "data": {
            "pairs": {"train": 100, "valid": 10, "test": 10},
            "verses": {"chapters_dropped": 3},
            "modules": {"es": {"module": "m", "version": "1"}},
        },
        "provenance": provenance(),
    }
    bible_report.write_report(results, meta, tmp_path / "report")
    readme = (tmp_path / "report" / "README.md").read_text()
    assert "**the paper's, not\nmeasured here**" in readme and "| residual | yes      | 12.50" in readme
    # its best fell from 4.25 (update 1,750) to 4.24 over the last quarter
    finished_row = ["1", "residual-e6d6-warmup-seed1", "finished at update 2500: plateau", "4.240", "0.23%"]
    assert finished_row in table_rows(readme)
    along = ["residual", "yes", "6.000", "4.600", "4.240", "not logged"]  # the curve at 500 / 1,000 / 2,000; it ended
    assert along in table_rows(readme)
    assert (tmp_path / "report" / "valid_loss.png").stat().st_size > 0 and (
        tmp_path / "report" / "valid_loss_zoom.png"
    ).exists()


def test_a_run_that_stopped_at_the_cap_trains_on_when_the_cap_rises_and_a_plateaued_one_is_kept(tmp_path, monkeypatch):
    trainer = FakeTrainer(plateau_curve)
    monkeypatch.setattr(bible_study, "run_training", trainer)
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring(bleu=lambda end: end / 100))
    spec = RunSpec("pre", 6, True, 1)
    data = {"databin": "D", "sha256": "d" * 64, "fingerprints": {spec: "fp"}}
    records, runs = tmp_path / "o" / "runs", tmp_path / "w" / "runs"

    def run(cap):
        return bible_study.run_one(spec, data, study_args(tmp_path, "--max-update-cap", cap), records, runs)

    capped = run("1500")
    assert (capped["end_update"], capped["max_update_cap"], capped["bleu"]) == (1500, 1500, 15.0)
    assert capped["stop"].startswith("reached --max-update-cap 1500") and run("1500")["reused"]
    assert trainer.targets == list(range(250, 1501, 250))
    raised = run("4000")  # the same run trained on from update 1500, not from the start
    assert (raised["reused"], raised["stop"], raised["end_update"], raised["bleu"]) == (False, "plateau", 2500, 25.0)
    assert trainer.targets == list(range(250, 2501, 250)) and len(list(records.glob("*.json"))) == 1
    assert run("4000")["reused"] and run("9000")["reused"] and len(trainer.targets) == 10


def test_with_a_budget_a_run_trains_past_its_plateau_to_the_budget_and_its_record_says_where_the_rule_stopped(
    tmp_path, monkeypatch
):
    trainer = FakeTrainer(plateau_curve)
    monkeypatch.setattr(bible_study, "run_training", trainer)
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring(bleu=lambda end: end / 100))
    spec = RunSpec("pre", 6, True, 1)
    data = {"databin": "D", "sha256": "d" * 64, "fingerprints": {spec: "fp"}}
    args = study_args(tmp_path, "--budget", "6=3500", "12=5000")
    record = bible_study.run_one(spec, data, args, tmp_path / "o" / "runs", tmp_path / "w" / "runs")
    assert (record["stop"], record["end_update"], record["budget"], record["bleu"]) == (
        "budget of 3500 updates",
        3500,
        3500,
        35.0,
    )
    assert trainer.targets == list(range(250, 3501, 250))  # on past the plateau at 2500
    assert (record["plateau_update"], record["best_valid_loss_at_plateau"]) == (2500, 4.24)
    assert bible_study.run_one(spec, data, args, tmp_path / "o" / "runs", tmp_path / "w" / "runs")["reused"]
    # the budget's runs are the plateau study's runs (one key): trained on from their checkpoints, not anew
    assert bible_study.run_key(spec, args, "d" * 64, "fp") == bible_study.run_key(
        spec, study_args(tmp_path), "d" * 64, "fp"
    )


def test_with_a_budget_a_run_the_rule_fails_at_its_plateau_stops_there_and_a_nan_at_once(tmp_path, monkeypatch):
    args = study_args(tmp_path, "--budget", "6=5000")
    stuck = FakeTrainer(lambda update: 9.0)  # training loss 9.5 throughout: no progress
    monkeypatch.setattr(bible_study, "run_training", stuck)
    stop = bible_study.train_to_end(RunSpec("post", 6, True, 1), "D", tmp_path / "a", args, "a")
    assert stop["stop"].startswith("failed by the rule at its plateau: no progress") and stop["end_update"] == 1000
    assert stuck.targets[-1] == 1000  # the plateau rule's first point (--plateau-min-updates 1000), not the budget
    nan = FakeTrainer(lambda u: 10 - u / 1000, nan_at=600)
    monkeypatch.setattr(bible_study, "run_training", nan)
    stop = bible_study.train_to_end(RunSpec("post", 6, True, 1), "D", tmp_path / "b", args, "b")
    assert stop["stop"].startswith("diverged: loss became NaN") and nan.targets == [250, 500, 750]
    # a depth without a budget trains to its plateau as before
    monkeypatch.setattr(bible_study, "run_training", FakeTrainer(plateau_curve))
    assert bible_study.train_to_end(RunSpec("pre", 12, True, 1), "D", tmp_path / "c", args, "c") == {
        "stop": "plateau",
        "end_update": 2500,
    }


def test_a_budget_off_the_validation_grid_or_above_the_cap_stops_the_study_in_one_line():
    for budget in ("6=1000.5", "6=1100", "6=40000", "six=1000"):
        with pytest.raises((ConfigError, SystemExit)):
            bible_study.parse_args(["--budget", budget])


def test_an_averaged_model_is_kept_at_every_validation_so_a_run_can_be_scored_at_any_other_runs_end(tmp_path):
    import torch

    def save(update):  # the fields of a fairseq-train checkpoint that averaging reads
        model = {"w": torch.full((2,), float(update))}
        state = {"model": model, "optimizer_history": [{"num_updates": update}], "last_optimizer_state": {"s": 1}}
        torch.save(state, tmp_path / f"checkpoint_1_{update}.pt")

    for update in (250, 500, 750):
        save(update)
        kept = bible_study.keep_average(tmp_path, update, 2)
        assert kept == bible_study.averaged_at(tmp_path, update)
    (tmp_path / "checkpoint_1_250.pt").unlink()  # fairseq's --keep-interval-updates deletes the old ones
    at = {u: torch.load(bible_study.averaged_at(tmp_path, u), weights_only=False) for u in (250, 500, 750)}
    assert [at[u]["model"]["w"][0].item() for u in (250, 500, 750)] == [250.0, 375.0, 625.0]  # the last two
    assert all("last_optimizer_state" not in a for a in at.values())  # a model, not a checkpoint to resume
    assert bible_study.keep_average(tmp_path, 1000, 2) is None  # no checkpoint at 1000: nothing to average there


def test_options_that_cannot_make_a_study_stop_in_one_line():
    with pytest.raises(ConfigError, match="multiple of --validate-every"):
        bible_study.parse_args(["--plateau-min-updates", "1100"])
    with pytest.raises(ConfigError, match="--nowarmup-schemes hc: not in --schemes"):
        bible_study.main(["--schemes", "pre", "--nowarmup-schemes", "hc"])
    for half in (["--cut-after", "7"], ["--cut-reason", "the envelope"]):
        with pytest.raises(ConfigError, match="--cut-after or --cut and --cut-reason go together"):
            bible_study.parse_args(half)
    with pytest.raises(ConfigError, match="--cut-after or --cut and --cut-reason go together"):
        bible_study.parse_args(["--cut", "pre-e6d6-warmup-seed1"])


def fake_data(args):
    """prepare_data: the summary the report reads, no corpus."""
    summary = {
        "pairs": {"train": 100, "valid": 10, "test": 4},
        "verses": {"chapters_dropped": 0},
        "modules": {"es": {"module": "SpaRV", "version": "1.0"}, "en": {"module": "WEB", "version": "2.0"}},
        "data_bin_sha256": "d" * 64,
    }
    return {"databin": "D", "sha256": "d" * 64, "summary": summary}


def faked_study(monkeypatch) -> FakeTrainer:
    """``bible_study.main`` with the stand-ins: training to ``plateau_curve``, scoring, data and fingerprint."""
    trainer = FakeTrainer(plateau_curve)
    monkeypatch.setattr(bible_study, "run_training", trainer)
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring())
    monkeypatch.setattr(bible_study, "prepare_data", fake_data)
    monkeypatch.setattr(bible_study, "model_fingerprint", lambda train_args: "fp")
    return trainer


def test_a_cut_plan_trains_its_first_runs_and_names_the_rest_as_cut_with_the_reason(tmp_path, monkeypatch):
    trainer = faked_study(monkeypatch)
    out = tmp_path / "o"
    argv = ["--work", str(tmp_path / "w"), "--out", str(out), "--plateau-min-updates", "1000", "--jobs", "1"]
    argv += ["--schemes", "pre", "residual", "--nowarmup-schemes", "pre", "residual", "--depths", "6", "--seeds", "1"]
    cut = ["--cut-after", "2", "--cut-reason", "the envelope: 12 hours hold the warmup cell only"]
    with pytest.raises(ConfigError, match="--cut-after 4: the plan has 4 runs; cut after 1 to 3"):
        bible_study.main(argv + ["--cut-after", "4", "--cut-reason", "none"])

    results = bible_study.main(argv + cut)
    assert [r["name"] for r in results] == ["pre-e6d6-warmup-seed1", "residual-e6d6-warmup-seed1"]
    assert len(trainer.targets) == 2 * 10 and len(list((out / "runs").glob("*.json"))) == 2  # 250 ... 2500 each
    readme = (out / "README.md").read_text()
    assert [row[2] for row in table_rows(readme) if row[0] in ("3", "4")] == ["cut", "cut"]
    assert "**2 of the 4 planned runs have finished**, 2 were cut." in readme
    assert (
        "**Cut: 2 runs** (the plan after its run 2, not trained, `--cut-after 2`): the envelope: 12 hours hold the "
        "warmup cell only" in readme
    )
    assert "--cut-reason 'the envelope: 12 hours hold the warmup cell only'" in readme  # the command, quoted
    published = json.loads((out / "results.json").read_text())
    assert published["cut"]["runs"] == ["pre-e6d6-nowarmup-seed1", "residual-e6d6-nowarmup-seed1"]
    assert "2 of the 4 planned runs finished; 2 cut (each named, with the reason" in bible_report.published_block(
        published
    )

    assert len(bible_study.main(argv)) == 4 and len(trainer.targets) == 4 * 10  # uncut: the rest trains
    results = bible_study.main(argv + cut)  # a finished run stays a result: nothing left to cut
    assert len(results) == 4 and len(trainer.targets) == 4 * 10
    readme = (out / "README.md").read_text()
    assert "Cut:" not in readme and "**4 of the 4 planned runs have finished**." in readme


def test_runs_cut_by_name_anywhere_in_the_plan_are_not_trained_and_a_few_runs_trained_alone_keep_the_cut(
    tmp_path, monkeypatch, capsys
):
    trainer = faked_study(monkeypatch)
    out = tmp_path / "o"
    base = ["--work", str(tmp_path / "w"), "--out", str(out), "--plateau-min-updates", "1000", "--jobs", "1"]
    study = [*base, "--schemes", "pre", "residual", "--nowarmup-schemes", "pre", "residual", "--depths", "6"]
    study += ["--seeds", "1"]  # pre, residual with warmup (runs 1, 2), then without (3, 4)
    reason = ["--cut-reason", "seeds before schemes"]
    with pytest.raises(ConfigError, match="--cut pre-e6d6-warmup-seed9: not a run of the plan; its runs: pre-e6d6-w"):
        bible_study.main([*study, "--cut", "pre-e6d6-warmup-seed9", *reason])

    cut = [*study, "--cut", "residual-e6d6-warmup-seed1", "pre-e6d6-nowarmup-seed1", *reason]
    bible_study.main([*cut, "--report-only"])  # the study's report, with its cut, before a run trains
    one = [*base, "--schemes", "pre", "--nowarmup-schemes", "--depths", "6", "--seeds", "1"]
    assert [r["name"] for r in bible_study.main(one)] == ["pre-e6d6-warmup-seed1"]  # a few runs alone
    assert "the report in " in capsys.readouterr().out
    readme = (out / "README.md").read_text()
    plan_rows = [row[2] for row in table_rows(readme) if row[0] in ("1", "2", "3", "4")]
    assert plan_rows == ["finished at update 2500: plateau", "cut", "cut", "not started"]
    assert (
        "**Cut: 2 runs** (2 named, not trained, `--cut residual-e6d6-warmup-seed1 pre-e6d6-nowarmup-seed1`): "
        "seeds before schemes" in readme
    )

    results = bible_study.main(cut)  # the study itself trains what it kept: run 4, not 2 or 3
    assert [r["name"] for r in results] == ["pre-e6d6-warmup-seed1", "residual-e6d6-nowarmup-seed1"]
    assert len(trainer.targets) == 2 * 10 and "cut, not trained: residual-e6d6-warmup-seed1, pre-e6d6-now" in (
        capsys.readouterr().out
    )
    both = [*study, "--cut-after", "1", "--cut", "residual-e6d6-nowarmup-seed1", *reason]  # finished: a result
    assert len(bible_study.main(both)) == 2 and len(trainer.targets) == 2 * 10
    published = json.loads((out / "results.json").read_text())
    assert published["cut"]["runs"] == ["residual-e6d6-warmup-seed1", "pre-e6d6-nowarmup-seed1"]
    assert (
        "**Cut: 2 runs** (the plan after its run 1 and 1 named, not trained, `--cut-after 1 --cut "
        "residual-e6d6-nowarmup-seed1`)" in (out / "README.md").read_text()
    )


def test_the_studys_cut_is_read_from_its_file_one_argument_a_line_and_names_runs_of_the_default_plan(tmp_path):
    cut_file = tmp_path / "cut.args"
    cut_file.write_text("--cut\npre-e12d12-nowarmup-seed1\n--cut-reason\nseeds before schemes, as the issue asks\n")
    args = bible_study.parse_args([f"@{cut_file}"])
    assert args.cut == ["pre-e12d12-nowarmup-seed1"] and args.cut_reason == "seeds before schemes, as the issue asks"
    committed = bible_study.parse_args([f"@{bible_study.DEFAULT_OUT / 'cut.args'}"])  # make bible-study-results's
    planned = {s.name for s in bible_study.plan(committed)}
    assert committed.cut and set(committed.cut) < planned and committed.cut_reason


@pytest.mark.parametrize("folder", sorted(bible_report.BLOCKS))
def test_the_readme_and_results_page_show_each_studys_table_as_its_results_json_holds_it(folder):
    from fairseq_residual_tools.markdown import block_of

    results_json = bible_study.DEFAULT_OUT.parent / folder / "results.json"
    assert bible_report.published_folder(results_json.parent) == folder
    for page in bible_report.PAGES:
        shown = block_of(page, *bible_report.BLOCKS[folder])
        if results_json.exists() and json.loads(results_json.read_text())["runs"]:
            expected = bible_report.published_block(json.loads(results_json.read_text()), folder)
            assert shown == expected, f"{page.name}: run the study with --report-only and commit what it writes"
        else:
            assert shown == "No run has finished yet."


def test_publish_writes_the_bleu_table_and_what_is_left_of_the_plan_between_the_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"before\n{bible_report.README_BLOCK[0]}\nold\n{bible_report.README_BLOCK[1]}\nafter\n")
    run = {"name": "pre-e6d6-warmup-seed1", "scheme": "pre", "layers": 6, "warmup": True, "seed": 1, "fails": None}
    results = {
        "plan": [plan_entry(RunSpec("pre", 6, True, 1)), plan_entry(RunSpec("post", 6, True, 1))],
        "provenance": {"date": "2026-12-04T10:00:00"},
        "runs": [{**run, "bleu": 20.25, "git": "abc1234"}],
    }
    bible_report.publish(results, [page])
    text = page.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "old" not in text
    assert table_rows(text)[1:] == [["pre", "yes", "20.25"], ["post", "yes", "not finished"]]
    assert "1 of the 2 planned runs finished; not yet trained: post-e6d6-warmup-seed1" in text
    many = {**results, "plan": results["plan"][:1] + [plan_entry(RunSpec("post", 6, True, s)) for s in range(2, 7)]}
    bible_report.publish(many, [page])  # a long plan is counted, not listed: the report names each run
    assert "1 of the 6 planned runs finished; 5 not yet trained (each named in `results/bible-study/README.md`)" in (
        page.read_text()
    )
    # the paper table's block on the same page, its figures at the study's budgets, its folder named
    other = bible_report.BLOCKS["paper-table"]
    page.write_text(page.read_text() + f"{other[0]}\nold\n{other[1]}\n")
    bible_report.publish({**many, "settings": {"budget": [[6, 8750]]}}, [page], "paper-table")
    text = page.read_text()
    assert (
        "at the end of each run (equal budgets: E6D6 8,750 updates; a run the rule fails stops at its plateau)" in text
    )
    assert "(each named in `results/paper-table/README.md`). From `results/paper-table/results.json`" in text
    assert text.count("20.25") == 2 and bible_report.published_folder(tmp_path / "results" / "paper-table") is None


def test_a_runs_key_is_the_same_in_a_checkout_at_another_path(monkeypatch):
    spec, args = RunSpec("residual", 6, True, 1), bible_study.parse_args([])
    key = bible_study.run_key(spec, args, "d" * 64, "fp")
    monkeypatch.setattr(bible_study, "PLUGIN_DIR", "/elsewhere/fairseq_residual")
    assert "/elsewhere/fairseq_residual" in bible_study.training_args("D", "S", spec, args, 0)
    assert bible_study.run_key(spec, args, "d" * 64, "fp") == key


def test_the_report_names_the_runs_under_way_and_where_they_are_until_they_finish(tmp_path, monkeypatch):
    trainer = FakeTrainer(plateau_curve, kill_at=1100)
    monkeypatch.setattr(bible_study, "run_training", trainer)
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring())
    args = study_args(tmp_path)
    started, waiting = RunSpec("pre", 6, True, 1), RunSpec("post", 6, True, 1)
    data = {"databin": "D", "sha256": "d" * 64, "fingerprints": {started: "fp", waiting: "fp2"}}
    records, runs = tmp_path / "o" / "runs", tmp_path / "w" / "runs"
    with pytest.raises(RunError):  # killed at update 1100: validated at 250 ... 1000
        bible_study.run_one(started, data, args, records, runs)
    running = bible_study.under_way([started, waiting], data, args)
    assert [(r["name"], r["update"], r["best_valid_loss"]) for r in running] == [("pre-e6d6-warmup-seed1", 1000, 4.6)]
    assert running[0]["valid_curve"] == [(250, 8), (500, 6), (750, 5), (1000, 4.6)]

    meta = {
        "command": "cmd",
        "plan": [plan_entry(started), plan_entry(waiting)],
        "provenance": {"date": "2026-12-04T17:05:09"},
        "settings": {**vars(args), "zoom_from": 500},
    }
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "summary.md").write_text("## Why the recipe changed\n")
    bible_report.write_report([], meta, tmp_path / "report", running)
    readme = (tmp_path / "report" / "README.md").read_text()
    assert "no run has finished yet" in readme and "\n\n## Why the recipe changed\n\nStarted with:" in readme
    assert (
        "Under way when this report was written (2026-12-04 17:05 UTC; not results): pre-e6d6-warmup-seed1 at update "
        "1000 (best validation loss 4.600). Their validation curves so far: [under_way.png](under_way.png)." in readme
    )
    assert (tmp_path / "report" / "under_way.png").stat().st_size > 0
    plan = [row for row in table_rows(readme) if row[0] in ("1", "2")]
    assert plan == [
        ["1", "pre-e6d6-warmup-seed1", "under way at update 1000", "4.600", "8.00%"],  # best 5.0 at 750 -> 4.6
        ["2", "post-e6d6-warmup-seed1", "not started", "-", "-"],
    ]

    bible_study.run_one(started, data, args, records, runs)  # resumed to its plateau: finished, no longer under way
    assert bible_study.under_way([started, waiting], data, args) == []
    bible_report.write_report([], meta, tmp_path / "report", [])
    assert not (tmp_path / "report" / "under_way.png").exists()  # no snapshot of runs no longer under way


def test_the_report_gives_each_run_its_fall_over_the_last_quarter_the_plateau_rules_measure():
    rule = bible_study.plateau_rule(bible_study.parse_args([]))
    capped = {"end_update": 8000, "valid_curve": [[2000, 6.0], [6000, 5.0], [7000, 5.1], [8000, 4.85]]}
    assert bible_report.last_quarter_gain(capped, rule) == "3.00%"  # best 5.0 at update 6000 -> 4.85 at 8000
    flat = {"end_update": 4000, "valid_curve": [[2000, 5.0], [3000, 4.9], [3500, 4.95], [4000, 4.92]]}
    assert bible_report.last_quarter_gain(flat, rule) == "0.00%"
    early = {"end_update": 750, "valid_curve": [[250, 9.0], [500, 8.0], [750, 11.0]]}  # diverged before the rule
    assert bible_report.last_quarter_gain(early, rule) == "-"


def test_a_fall_just_under_the_rules_one_percent_never_reads_as_one_percent():
    rule = bible_study.plateau_rule(bible_study.parse_args([]))
    # the pilot's Pre-LN run: best 4.606 at update 4,500 -> 4.560 at 6,000, a 0.999 % fall: plateaued by the rule
    pilot = {"end_update": 6000, "valid_curve": [[2000, 4.961], [4500, 4.606], [5000, 4.573], [6000, 4.56]]}
    assert rule.holds_at(pilot["valid_curve"], 6000)
    assert bible_report.last_quarter_gain(pilot, rule) == "0.99%"
    just_over = {"end_update": 6000, "valid_curve": [[2000, 5.0], [4500, 4.6], [6000, 4.553]]}  # 1.02 %: not yet
    assert not rule.holds_at(just_over["valid_curve"], 6000)
    assert bible_report.last_quarter_gain(just_over, rule) == "1.02%"


def test_each_scored_run_is_tested_against_pre_ln_of_its_cell_on_the_translations_kept_beside_its_record(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(bible_study, "run_training", FakeTrainer(plateau_curve))
    args = study_args(tmp_path)
    records, runs = tmp_path / "o" / "runs", tmp_path / "w" / "runs"
    darker = [line.replace("light", "dark") for line in REFERENCES]
    halved = darker[:2] + REFERENCES[2:]
    specs = {
        RunSpec("pre", 6, True, 1): REFERENCES,
        RunSpec("residual", 6, True, 1): darker,
        RunSpec("residual:scale=0.5", 6, True, 1): halved,
        RunSpec("hc", 6, True, 1): darker[:1] + REFERENCES[1:],
    }
    data = {"databin": "D", "sha256": "d" * 64, "fingerprints": {spec: "fp" for spec in specs}}
    results = []
    for spec, hypotheses in specs.items():
        monkeypatch.setattr(bible_study, "average_and_score", FakeScoring(hypotheses))
        results.append(bible_study.run_one(spec, data, args, records, runs))
    kept = bible_report.hypotheses_file(records, results[1])
    assert kept.name == f"residual-e6d6-warmup-seed1-{results[1]['key']}.test.detok"
    hypotheses = kept.read_text().splitlines()
    references = (records / "test-references.txt").read_text().splitlines()
    assert hypotheses[0] == "and god said, let there be dark: and there was dark."  # Moses-detokenised
    assert references == ORIGINALS and (records / "test-chapters.txt").read_text().splitlines()[2] == "Genesis 2"

    detok = {r["scheme"]: bible_report.hypotheses_file(records, r).read_text().splitlines() for r in results}
    lc = BLEU(lowercase=True)
    bleu = {scheme: f"{lc.corpus_score(lines, [references]).score:.2f}" for scheme, lines in detok.items()}
    rows = table_rows(bible_report.significance_table(*bible_report.comparisons(results, records)))
    # every run against Pre-LN of its cell; ResiDual's option and the designs after it (hc) against ResiDual too
    assert [row[3:7] for row in rows[1:]] == [
        ["residual", "pre", bleu["pre"], bleu["residual"]],
        ["residual:scale=0.5", "pre", bleu["pre"], bleu["residual:scale=0.5"]],
        ["hc", "pre", bleu["pre"], bleu["hc"]],
        ["residual:scale=0.5", "residual", bleu["residual"], bleu["residual:scale=0.5"]],
        ["hc", "residual", bleu["residual"], bleu["hc"]],
    ]
    assert rows[1][:3] == ["E6D6", "yes", "1"] and bleu["pre"] == "100.00" and rows[1][7].startswith("-")
    assert float(rows[-1][7]) > 0 and 0 < float(rows[1][9]) <= float(rows[1][10]) <= 1  # p, then Holm's
    assert rows[1][11:13] == ["-", "one seed"]

    kept.unlink()  # a record scored before translations were kept: filled in from its decoding in --work
    bible_study.backfill_test_outputs(results, args, "D")
    assert kept.read_text().splitlines() == hypotheses
    kept.unlink()  # ... but not from a decoding other than the one its record scored
    out_file = runs / f"residual-e6d6-warmup-seed1-{results[1]['key']}" / "generate-test.out"
    out_file.write_text(out_file.read_text().replace("BLEU4 = 12.50", "BLEU4 = 13.00"))
    bible_study.backfill_test_outputs(results, args, "D")
    assert not kept.exists()

    monkeypatch.setattr(bible_study, "test_text", lambda databin: {**TEST_TEXT, "references": ORIGINALS[::-1]})
    with pytest.raises(DataError, match="holds another test set"):  # the records beside hold another test set
        bible_study.keep_test_output(out_file, records, results[1], "en", "D")


def test_the_zoomed_curves_show_the_second_half_of_the_longest_run_unless_told():
    settings = vars(bible_study.parse_args([]))
    runs = [
        {"valid_curve": [[250, 9.0], [22750, 4.3]]},
        {"valid_curve": [[250, 9.0], [8000, 4.9]]},
        {"valid_curve": []},
    ]
    assert bible_report.zoom_start(runs, settings) == 11250  # half of 22,750, on a validation (every 250)
    assert bible_report.zoom_start(runs, {**settings, "zoom_from": 5000}) == 5000
    assert bible_report.zoom_start([], settings) == 250


def test_a_few_runs_of_a_study_trained_on_their_own_leave_its_report_whole_and_other_settings_make_their_own(
    tmp_path, monkeypatch, capsys
):
    faked_study(monkeypatch)
    out = tmp_path / "o"
    base = ["--work", str(tmp_path / "w"), "--out", str(out), "--plateau-min-updates", "1000"]
    study = [*base, "--schemes", "pre", "residual", "--nowarmup-schemes", "pre", "residual", "--depths", "6"]
    study += ["--seeds", "1", "2"]  # 4 runs with warmup, 4 without

    def published():
        return json.loads((out / "results.json").read_text())

    bible_study.main([*study, "--report-only"])
    assert len(published()["plan"]) == 8 and published()["runs"] == []
    one = [*base, "--schemes", "residual", "--nowarmup-schemes", "--depths", "6", "--seeds", "2", "--jobs", "1"]
    assert [r["name"] for r in bible_study.main(one)] == ["residual-e6d6-warmup-seed2"]
    assert "the report in " in capsys.readouterr().out
    report = published()
    assert len(report["plan"]) == 8
    assert report["command"].endswith("--seeds 1 2") and report["settings"]["schemes"] == ["pre", "residual"]
    assert [r["name"] for r in report["runs"]] == ["residual-e6d6-warmup-seed2"]
    assert "**1 of the 8 planned runs have finished**" in (out / "README.md").read_text()
    bible_study.main([*one, "--report-only"])  # so does a report-only of the few
    assert len(published()["plan"]) == 8 and len(published()["runs"]) == 1
    assert "the report in " in capsys.readouterr().out

    other = [*one, "--lr", "1e-3"]  # another recipe: another plan, its own report
    bible_study.main(other)
    assert (
        bible_report.plan_names(published()) == ["residual-e6d6-warmup-seed2"] and published()["settings"]["lr"] == 1e-3
    )
    assert "the report in " not in capsys.readouterr().out


@contextlib.contextmanager
def held_elsewhere(save_dir, who="bible_study"):
    """``training_lock(save_dir)`` held by another process (another invocation on the same ``--work``) until the
    block ends, which SIGKILLs it: no cleanup runs there. Yields its pid."""
    code = (
        "import pathlib, time\nfrom fairseq_residual_tools.analysis.bible_study import training_lock\n"
        f"with training_lock(pathlib.Path({str(save_dir)!r}), {who!r}):\n    print('held', flush=True)\n"
        "    time.sleep(600)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_a_run_another_invocation_is_training_is_left_to_it_and_the_rest_of_the_plan_trains(
    tmp_path, monkeypatch, capsys
):
    trainer = faked_study(monkeypatch)
    argv = ["--work", str(tmp_path / "w"), "--out", str(tmp_path / "o"), "--plateau-min-updates", "1000"]
    argv += ["--schemes", "pre", "residual", "--nowarmup-schemes", "--depths", "6", "--seeds", "1", "--jobs", "1"]
    pre = RunSpec("pre", 6, True, 1)
    save_dir = (
        tmp_path / "w" / "runs" / f"{pre.name}-{bible_study.run_key(pre, bible_study.parse_args(argv), 'd' * 64, 'fp')}"
    )
    with held_elsewhere(save_dir) as pid:
        results = bible_study.main(argv)
        out = capsys.readouterr().out
        assert [r["name"] for r in results] == ["residual-e6d6-warmup-seed1"] and len(trainer.targets) == 10
        assert f"[busy] {save_dir} is being trained by bible_study pid {pid} on " in out
        assert "1 run(s) left to the process training them: pre-e6d6-warmup-seed1" in out
        assert "without a verdict" not in out  # not a crash: nothing to retry while the other process trains it
        assert not save_dir.exists()  # this invocation wrote nothing where the other one trains
    results = bible_study.main(argv)  # the other process gone (killed): the same command trains the run
    assert [r["name"] for r in results] == ["pre-e6d6-warmup-seed1", "residual-e6d6-warmup-seed1"]
    assert len(trainer.targets) == 20 and "[busy]" not in capsys.readouterr().out


def test_a_resumed_study_ends_the_runs_under_way_before_it_starts_another(tmp_path, monkeypatch, capsys):
    trainer = faked_study(monkeypatch)
    argv = ["--work", str(tmp_path / "w"), "--out", str(tmp_path / "o"), "--plateau-min-updates", "1000"]
    argv += ["--schemes", "pre", "residual", "hc", "--nowarmup-schemes", "--depths", "6", "--seeds", "1", "--jobs", "1"]
    args, hc = bible_study.parse_args(argv), RunSpec("hc", 6, True, 1)
    data = dict(fake_data(args), fingerprints={hc: "fp"})
    trainer.kill_at = 650  # the plan's third run, killed at update 650 by a session's end
    with pytest.raises(RunError):
        bible_study.train_to_end(hc, "D", tmp_path / "w" / "runs" / bible_study.run_name(hc, data, args)[1], args, "")
    trainer.targets.clear()
    assert [r["name"] for r in bible_study.main(argv)] == [f"{s}-e6d6-warmup-seed1" for s in ("pre", "residual", "hc")]
    assert trainer.targets[:8] == [750, 1000, 1250, 1500, 1750, 2000, 2250, 2500]  # hc from its checkpoint, first
    assert trainer.targets[8:] == [*range(250, 2501, 250)] * 2  # then pre and residual, in the plan's order
    assert "[1/3 ended] run 3 hc-e6d6-warmup-seed1" in capsys.readouterr().out  # its place in the plan


def test_the_progress_line_counts_ended_runs_and_names_each_ones_place_in_the_plan(tmp_path, monkeypatch, capsys):
    specs = [RunSpec("pre", 6, True, 1), RunSpec("residual", 6, True, 1), RunSpec("post", 6, True, 1)]
    second_reported = threading.Event()

    def run_one(spec, *_):
        if spec == specs[0]:
            assert second_reported.wait(10)  # the first of the plan ends after the second
        result = dict(stop="plateau", end_update=2000, fails=None, bleu=30.0, reused=spec == specs[2])
        return {**result, "name": spec.name}

    monkeypatch.setattr(bible_study, "run_one", run_one)
    monkeypatch.setattr(bible_study, "under_way", lambda *_: [])  # none resumed: the plan's order
    monkeypatch.setattr(bible_study, "finished", lambda *_: [])  # none ended before
    args = Namespace(work=str(tmp_path), out=str(tmp_path), jobs=2)
    bible_study.run_all(specs, {}, args, started=0.0, report=second_reported.set)
    lines = [line.split(":")[0] for line in capsys.readouterr().out.splitlines()]
    assert [line.split("] ")[0] for line in lines] == ["[1/3 ended", "[2/3 ended", "[3/3 ended"]
    assert lines[0] == "[1/3 ended] run 2 residual-e6d6-warmup-seed1"  # ended first, second in the plan
    assert sorted(line.split("] ")[1] for line in lines) == [
        "run 1 pre-e6d6-warmup-seed1",
        "run 2 residual-e6d6-warmup-seed1",
        "run 3 post-e6d6-warmup-seed1",
    ]


def test_runs_that_finished_before_are_named_in_one_line_and_the_count_of_ended_runs_goes_on_from_them(
    tmp_path, monkeypatch, capsys
):
    trainer = faked_study(monkeypatch)
    argv = ["--work", str(tmp_path / "w"), "--out", str(tmp_path / "o"), "--plateau-min-updates", "1000"]
    argv += ["--nowarmup-schemes", "--depths", "6", "--seeds", "1", "--jobs", "1"]
    bible_study.main([*argv, "--schemes", "pre", "hc"])  # runs 1 and 3 of the larger plan below
    capsys.readouterr()
    trained = len(trainer.targets)
    bible_study.main([*argv, "--schemes", "pre", "residual", "hc"])
    lines = capsys.readouterr().out.splitlines()
    reused = [line for line in lines if "reused" in line]
    assert reused == ["2 of 3 runs finished earlier with these settings, data and model: reused (runs 1, 3)"]
    assert len(trainer.targets) == trained + 10  # residual alone trained
    assert any(line.startswith("[3/3 ended] run 2 residual-e6d6-warmup-seed1: plateau") for line in lines)


def test_the_bleu_table_reads_not_finished_where_a_depth_has_no_finished_run_of_a_scheme_yet():
    def record(scheme, layers, bleu, fails=None):
        return dict(scheme=scheme, layers=layers, warmup=True, seed=1, bleu=bleu, fails=fails)

    finished_so_far = [record("post", 6, 33.79), record("pre", 6, 32.45), record("post", 12, None, "no progress")]
    rows = table_rows(bible_report.cell_table(finished_so_far, "bleu", 2))
    assert rows[1:] == [["post", "yes", "33.79", "fails (1/1)"], ["pre", "yes", "32.45", "not finished"]]


def test_with_its_plan_the_bleu_table_has_a_row_for_every_planned_scheme_and_warmup_and_names_cut_cells():
    args = bible_study.parse_args(["--schemes", "post", "pre", "--nowarmup-schemes", "pre", "--seeds", "1", "2"])
    plan = [plan_entry(s) for s in bible_study.plan(args)]  # E6D6 (seeds 1, 2), E12D12 (seed 1)
    done = [dict(p, bleu=b, fails=None) for p, b in zip(plan, (33.79, 32.45))]  # E6D6 with warmup, seed 1
    cut = ["post-e6d6-warmup-seed2", "pre-e6d6-nowarmup-seed2", "pre-e12d12-nowarmup-seed1"]
    rows = table_rows(bible_report.cell_table(done, "bleu", 2, {"plan": plan, "cut": {"runs": cut}}))
    assert rows[0] == ["scheme", "warmup", "E6D6", "E12D12"]
    assert rows[1:] == [
        ["post", "yes", "33.79", "not finished"],  # its seed 2 cut: the cell is whole
        ["pre", "yes", "32.45 (1 of 2 seeds)", "not finished"],
        ["pre", "no", "not finished", "cut"],  # no run finished: the row is there all the same
    ]


def test_a_zoomed_panel_that_no_run_reaches_says_so_and_the_legend_shows_the_seeds_line_styles(tmp_path, monkeypatch):
    from fairseq_residual_tools.analysis import plotting

    figures = []
    monkeypatch.setattr(plotting, "save", lambda fig, path, dpi: figures.append(fig))

    def run(scheme, layers, seed, curve, fails=None):
        return dict(scheme=scheme, layers=layers, warmup=True, seed=seed, valid_curve=curve, fails=fails)

    shallow = [run("pre", 6, s, [[250, 8.0], [5000, 4.6], [5500, 4.5]]) for s in (1, 2)]
    failed = run("post", 12, 1, [[250, 9.1], [2000, 10.2]], fails="diverged")
    bible_report.plot_curves([*shallow, failed], tmp_path / "zoom.png", "t", zoom_from=5000)
    (fig,) = figures
    deep = next(ax for ax in fig.axes if ax.get_title() == "E12D12, warmup yes, from update 5000")
    assert not deep.lines and [t.get_text() for t in deep.texts] == ["no point in this range:\npost seed 1 (fails)"]
    (legend,) = fig.legends
    styles = {t.get_text(): h.get_linestyle() for t, h in zip(legend.get_texts(), legend.legend_handles)}
    assert styles == {"pre seed 1": "-", "pre seed 2": "--"} and legend.handlelength >= 3  # dashes visible


def test_a_report_rewritten_alone_reports_a_record_made_under_an_older_key_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bible_study, "run_training", FakeTrainer(plateau_curve))
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring())
    args, spec = study_args(tmp_path), RunSpec("pre", 6, True, 1)
    data = {"databin": "D", "sha256": "d" * 64, "fingerprints": {spec: "fp"}}
    records = tmp_path / "o" / "runs"
    made = bible_study.run_one(spec, data, args, records, tmp_path / "w" / "runs")
    older = records / f"{spec.name}-0123456789ab.json"  # as if the key's recipe had changed since it trained
    (records / f"{spec.name}-{made['key']}.json").rename(older)
    assert bible_study.finished([spec], data, args) == []  # nothing to reuse for training
    (found,) = bible_study.recorded([spec], data, args)  # but the report reports what was recorded
    assert found["bleu"] == made["bleu"] and "recorded under another key" in capsys.readouterr().out
    (records / f"{spec.name}-fedcba987654.json").write_text(older.read_text())
    assert bible_study.recorded([spec], data, args) == []  # two candidates: none is taken for it


def test_a_budgeted_studys_report_names_its_budgets_where_the_rule_would_have_stopped_and_the_papers_wmt_table(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(bible_study, "run_training", FakeTrainer(plateau_curve))
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring())
    args, spec = study_args(tmp_path, "--budget", "6=3000"), RunSpec("deepnet", 6, True, 1)
    data = {"databin": "D", "sha256": "d" * 64, "fingerprints": {spec: "fp"}}
    record = bible_study.run_one(spec, data, args, tmp_path / "o" / "runs", tmp_path / "w" / "runs")
    meta = {
        "command": "cmd",
        "plan": [plan_entry(spec)],
        "settings": {k: v for k, v in vars(args).items() if k not in ("work", "out")},
        "data": {
            "pairs": {"train": 100, "valid": 10, "test": 4},
            "verses": {"chapters_dropped": 3},
            "modules": {"es": {"module": "m", "version": "1"}},
        },
        "provenance": provenance(),
    }
    bible_report.write_report([record], meta, tmp_path / "report")
    readme = (tmp_path / "report" / "README.md").read_text()
    assert readme.startswith("# The paper's comparison at equal budgets")
    assert "**Equal budgets**: E6D6 3,000 updates" in readme
    row = ["deepnet-e6d6-warmup-seed1", "3,000", "budget of 3000 updates", "2,500", "4.240", "4.240"]
    assert row in table_rows(readme)
    assert ["b2t", "26.53", "27.30"] in table_rows(readme) and ["deepnet", "yes", "35.34", "35.39"] in table_rows(
        readme
    )
    assert "- Models: E6D6 `residual_transformer_iwslt_de_en`" in readme
