"""The CPU study's pipeline: commands, the fails rule, the table in the paper's shape,
resuming, and probing one of its checkpoints. A reduced run checks the pipeline only."""

import json
from argparse import Namespace
from pathlib import Path

import pytest
from fairseq import options
from helpers import commit_during_training

from fairseq_residual_tools.analysis import dead_units, probes, study
from fairseq_residual_tools.errors import ConfigError, DataError
from fairseq_residual_tools.training_log import training_seconds

# probes.main sets torch's thread count (its --threads, 1): the fixture restores it after the module
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def cells(line):
    """The cells of a Markdown table row, without the padding."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parsed_training_args(spec, settings):
    cmd = study.training_command(Path("DATA_BIN"), Path("SAVE_DIR"), spec, settings)
    assert cmd[1:3] == ["-m", "fairseq_cli.train"]
    return options.parse_args_and_arch(options.get_training_parser(), cmd[3:])


def test_warmup_off_starts_at_the_same_peak_lr_and_changes_nothing_else():
    settings = study.parse_args(["--lr", "0.002", "--warmup", "40"])
    with_warmup = parsed_training_args(study.RunSpec("post", 12, True, 1), settings)
    without = parsed_training_args(study.RunSpec("post", 12, False, 1), settings)
    assert with_warmup.warmup_init_lr == pytest.approx(1e-7)
    assert without.warmup_init_lr == pytest.approx(0.002) == without.lr[0]
    assert without.warmup_updates == with_warmup.warmup_updates == 40
    assert (without.encoder_layers, without.decoder_layers, without.residual_scheme) == (12, 12, "post")
    differing = {k for k in vars(without) if getattr(without, k) != getattr(with_warmup, k, None)}
    assert differing == {"warmup_init_lr"}


def test_table_has_the_paper_layout_and_reports_failures():
    def run(scheme, layers, warmup, seed, bleu, fails=None):
        return dict(scheme=scheme, layers=layers, warmup=warmup, seed=seed, bleu=bleu, fails=fails)

    results = [
        run("post", 6, True, 1, 10.0),
        run("post", 6, True, 2, 12.0),
        run("post", 12, False, 1, None, "training loss became NaN/inf"),
        run("post", 12, False, 2, None, "no progress (loss 9 -> 9)"),
        run("residual", 12, False, 1, 20.0),
        run("residual", 12, False, 2, None, "loss became NaN"),
    ]
    lines = study.ablation_table(results, "bleu", 2).splitlines()
    assert cells(lines[0]) == ["method", "warmup", "E6D6", "E12D12"]
    assert cells(lines[2]) == ["post", "yes", "11.00 ± 1.00", "not run"]
    assert cells(lines[3]) == ["post", "no", "not run", "fails (2/2)"]
    assert cells(lines[5]) == [
        "residual",
        "no",
        "not run",
        "20.00 (1/2 fail)",
    ]  # one seed trained: its value, no spread


def test_training_time_adds_up_the_attempts_of_a_resumed_run(tmp_path):
    out = tmp_path / "train.out"
    out.write_text(
        "$ fairseq-train ...\n2026-01-01 10:00:00 | INFO | a\n2026-01-01 10:01:40 | INFO | b\n"
        "Traceback (killed)\n$ fairseq-train ...\n2026-01-01 11:00:00 | INFO | c\n2026-01-01 11:00:30 | INFO | d\n"
    )
    assert training_seconds(out) == 130.0


@pytest.fixture(scope="module")
def reduced_study(tmp_path_factory):
    work, out = tmp_path_factory.mktemp("study-work"), tmp_path_factory.mktemp("study-out")
    argv = [
        "--work",
        str(work),
        "--out",
        str(out),
        "--schemes",
        "residual",
        "--depths",
        "2",
        "--seeds",
        "1",
        "--dim",
        "16",
        "--max-update",
        "6",
        "--warmup",
        "3",
        "--validate-every",
        "3",
        "--log-interval",
        "1",
        "--max-tokens",
        "512",
        "--train-pairs",
        "200",
        "--valid-pairs",
        "10",
        "--test-pairs",
        "10",
        "--bpe-merges",
        "100",
        "--jobs",
        "2",
    ]
    return work, out, argv, study.main(argv)


def test_the_loss_at_an_update_is_read_off_each_runs_curve_and_averaged_over_seeds():
    def run(warmup, seed, curve, fails=None):
        return dict(scheme="pre", layers=3, warmup=warmup, seed=seed, valid_curve=curve, fails=fails)

    results = [
        run(True, 1, [[50, 9.0], [150, 7.0]]),
        run(True, 2, [[50, 8.0], [150, 6.0]]),
        run(False, 1, [[50, 8.5], [100, 8.0]]),  # stopped before update 150
        run(False, 2, [[50, 9.5], [150, 9.0]], fails="stuck on a plateau"),
    ]
    lines = study.losses_at_table(results, ("scheme", "warmup"), (50, 150), lambda d, u: f"E{d}D{d} @ {u}")
    rows = [cells(line) for line in lines.splitlines()]
    assert rows[0] == ["scheme", "warmup", "E3D3 @ 50", "E3D3 @ 150"]
    assert rows[2] == ["pre", "yes", "8.500 ± 0.500", "6.500 ± 0.500"]
    assert rows[3] == ["pre", "no", "8.500 (1/2 fail)", "not logged"]


def test_a_run_folder_made_by_other_settings_stops_the_study_before_anything_trains(tmp_path):
    settings = study.parse_args(["--max-update", "150"])
    spec, data = study.RunSpec("pre", 3, True, 1), Namespace(databin=tmp_path / "data-bin")
    (tmp_path / "runs" / spec.name).mkdir(parents=True)
    made = study.training_command(data.databin, tmp_path / "runs" / spec.name, spec, settings)
    (tmp_path / "runs" / spec.name / study.COMMAND_FILE).write_text(" ".join(map(str, made[2:])))
    study.check_recorded_runs([spec], data, settings, tmp_path / "runs")  # the same command: resumed
    longer = study.parse_args(["--max-update", "600"])
    with pytest.raises(ConfigError, match=f"holds run {spec.name} trained with other settings: give this study"):
        study.check_recorded_runs([spec], data, longer, tmp_path / "runs")


@pytest.mark.slow
def test_reduced_study_trains_scores_and_reports_every_run(reduced_study):
    work, out, argv, results = reduced_study
    assert sorted(r["name"] for r in results) == ["residual-e2d2-nowarmup-seed1", "residual-e2d2-warmup-seed1"]
    for r in results:
        assert [u for u, _ in r["train_curve"]] == [1, 2, 3, 4, 5, 6]
        assert [u for u, _ in r["valid_curve"]] == [3, 6]
        assert r["final_valid_loss"] == r["valid_curve"][-1][1] > 0
        # a run either trained and was scored, or carries the shared rule's reason
        assert (r["fails"] is None and r["bleu"] >= 0) or (isinstance(r["fails"], str) and r["bleu"] is None)
        assert r["train_seconds"] > 0
    readme = (out / "README.md").read_text()
    rows = [cells(line)[:2] for line in readme.splitlines() if line.startswith("|")]
    assert ["residual", "yes"] in rows and ["residual", "no"] in rows
    assert "small-scale analogue" in readme and "scripts/cpu_study.py" in readme
    assert json.loads((out / "results.json").read_text())["settings"]["max_update"] == 6
    for png in ("train_loss.png", "valid_loss.png"):
        assert (out / png).stat().st_size > 10_000


@pytest.mark.slow
def test_a_second_call_skips_finished_runs_and_rejudges_them_with_the_current_rule(reduced_study):
    work, out, argv, results = reduced_study
    logs = sorted((work / "runs").glob("*/train.out"))
    before = [p.read_text() for p in logs]
    stale = work / "runs" / "residual-e2d2-warmup-seed1" / "result.json"
    stale.write_text(json.dumps({**json.loads(stale.read_text()), "fails": "verdict of an older rule"}))
    again = study.main(argv)
    assert [p.read_text() for p in logs] == before  # no new fairseq-train attempt
    assert [r["final_valid_loss"] for r in again] == [r["final_valid_loss"] for r in results]
    assert [r["fails"] for r in again] == [r["fails"] for r in results]


@pytest.mark.slow
def test_probes_read_a_trained_checkpoint(reduced_study, tmp_path):
    work, out, argv, results = reduced_study
    checkpoint = work / "runs" / "residual-e2d2-warmup-seed1" / "checkpoint_last.pt"
    summary = probes.main(
        [
            "--checkpoint",
            str(checkpoint),
            "--data",
            str(work / "data" / "data-bin"),
            "--sentences",
            "4",
            "--out",
            str(tmp_path),
        ]
    )
    assert list(summary) == ["residual"] and list(summary["residual"]) == ["2"]
    assert len(summary["residual"]["2"]["decoder"]["grad_norm"]["mean"]) == 2


@pytest.mark.slow
def test_dead_units_read_every_sentence_of_a_trained_checkpoints_split(reduced_study, tmp_path):
    work, out, argv, results = reduced_study
    checkpoint = work / "runs" / "residual-e2d2-warmup-seed1" / "checkpoint_last.pt"
    data = work / "data" / "data-bin"
    runs = dead_units.main(
        ["--checkpoint", str(checkpoint), "--data", str(data), "--chunk", "3", "--out", str(tmp_path)]
    )
    task = probes.fairseq_task(data)
    assert [r["name"] for r in runs] == ["residual-e2d2-warmup-seed1"] and runs[0]["scheme"] == "residual"
    assert runs[0]["sentences"] == probes.split_size(task, "valid")  # every sentence, in chunks of 3
    assert [len(runs[0][side]) for side in ("encoder", "decoder")] == [2, 2]
    assert all(0 <= share <= 1 for side in ("encoder", "decoder") for share in runs[0][side])
    whole = dead_units.main(["--checkpoint", str(checkpoint), "--data", str(data), "--out", str(tmp_path / "one")])
    assert whole == runs  # the maxima carried across chunks: one pass over the split counts the same
    with pytest.raises(DataError, match="--split tset: data folder .* has no 'tset' split"):
        dead_units.main(
            ["--checkpoint", str(checkpoint), "--data", str(data), "--split", "tset", "--out", str(tmp_path)]
        )
    written = json.loads((tmp_path / "dead_units.json").read_text())
    assert written["runs"] == runs and "dead_units --checkpoint" in written["command"]
    read = [Path(f).name for f in written["made_from"]["inputs"]]
    assert sorted(f.rsplit(".", 1)[1] for f in read if f.startswith("valid.")) == ["bin", "bin", "idx", "idx"]
    assert not [f for f in read if f.startswith(("train.", "test."))]  # the split the count read, through the task
    assert "| residual-e2d2-warmup-seed1 |" in (tmp_path / "README.md").read_text()


def test_a_run_records_the_tree_its_training_started_from_not_the_one_it_ended_on(tmp_path, monkeypatch):
    now = commit_during_training(monkeypatch, study)
    spec = study.RunSpec("pre", 2, True, 1)
    result = study.run_one(spec, Namespace(databin=tmp_path / "bin"), None, study.parse_args([]), tmp_path / "runs")
    assert now["tree"]["commit"] == "b" * 40 and result["git"] == "aaaaaaa"
    assert json.loads((tmp_path / "runs" / spec.name / "result.json").read_text())["git"] == "aaaaaaa"
