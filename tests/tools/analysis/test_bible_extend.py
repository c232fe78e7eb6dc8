"""A finished run of the Bible study trained on past its plateau (``analysis.bible_extend``): it continues from the
run's last checkpoint to the update asked, is scored as the study scores, is compared with its cell's runs, is
reused once made, and refuses what it cannot extend in one line. fairseq-train and scoring are the study tests'
stand-ins."""

import json
import shutil

import pytest
from test_bible_study import (  # noqa: F401 (recipe_test_text: an autouse fixture)
    REFERENCES,
    FakeScoring,
    FakeTrainer,
    held_elsewhere,
    plateau_curve,
    recipe_test_text,
    study_args,
)

from fairseq_residual_tools.analysis import bible_extend, bible_study
from fairseq_residual_tools.analysis.study import RunSpec
from fairseq_residual_tools.errors import ConfigError
from fairseq_residual_tools.folder_lock import FolderBusy

PRE, POST = RunSpec("pre", 6, True, 1), RunSpec("post", 6, True, 1)


def after_plateau(update):
    """The study's plateau curve (it ends at 2,500), then falling on to 4.0 by update 3,000."""
    return {2750: 4.1, 3000: 4.0}.get(update, plateau_curve(update))


def finished_cell(tmp_path, monkeypatch):
    """Pre-LN and Post-LN of one cell finished by the study; Post-LN translates the test set worse."""
    trainer = FakeTrainer(after_plateau)
    monkeypatch.setattr(bible_study, "run_training", trainer)
    args = study_args(tmp_path)
    fingerprints = {spec: f"fp-{spec.scheme}" for spec in bible_extend.cell(PRE, args)}  # the cell's seven schemes
    data = {"databin": "D", "sha256": "d" * 64, "fingerprints": fingerprints}
    records, runs = tmp_path / "o" / "runs", tmp_path / "w" / "runs"
    worse = [line.replace("light", "dark") for line in REFERENCES]
    for spec, hypotheses in ((PRE, REFERENCES[:2] + worse[2:]), (POST, worse)):
        monkeypatch.setattr(bible_study, "average_and_score", FakeScoring(hypotheses))
        bible_study.run_one(spec, data, args, records, runs)
    return trainer, args, data


def test_a_finished_run_trains_on_from_its_last_checkpoint_to_the_update_asked_and_is_compared_with_its_cell(
    tmp_path, monkeypatch
):
    trainer, args, data = finished_cell(tmp_path, monkeypatch)
    trained = len(trainer.targets)
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring(REFERENCES, bleu=lambda end: end / 100))
    result = bible_extend.extend(PRE, 3000, data, args)
    assert trainer.targets[trained:] == [2750, 3000]  # from the plateau's 2,500 on, not from the start
    assert result["from_update"] == 2500 and result["end_update"] == 3000 and result["bleu"] == 30.0
    assert result["stop"] == "trained on to update 3000" and result["best_valid_loss"] == 4.0
    assert [u for u, _ in result["valid_curve"]][-3:] == [2500, 2750, 3000]
    original = tmp_path / "w" / "runs" / result["extends"] / "train.out"
    assert "3000" not in original.read_text()  # the study's run is left as it was
    compared = {c["name"]: c for c in result["compared"]}
    assert set(compared) == {"pre-e6d6-warmup-seed1", "post-e6d6-warmup-seed1"}
    assert compared["post-e6d6-warmup-seed1"]["delta"] < compared["pre-e6d6-warmup-seed1"]["delta"] < 0
    assert compared["post-e6d6-warmup-seed1"]["end_update"] == 2500
    out = tmp_path / "o" / "extended"
    stem = f"pre-e6d6-warmup-seed1-to-3000-{result['key']}"  # the record and its translations side by side
    assert json.loads((out / f"{stem}.json").read_text())["to_update"] == 3000
    assert (out / f"{stem}.test.detok").read_text().splitlines()[
        0
    ] == "and god said, let there be light: and there was light."
    readme = (out / "README.md").read_text()
    assert "## pre-e6d6-warmup-seed1-to-3000" in readme and "from update 2,500 to 3,000; best" in readme
    assert "--run pre-e6d6-warmup-seed1 --to 3000" in readme

    again = bible_extend.extend(PRE, 3000, data, args)  # made: reused, nothing trained
    assert again["bleu"] == 30.0 and len(trainer.targets) == trained + 2


def test_an_extension_killed_half_way_resumes_from_its_own_last_validation(tmp_path, monkeypatch):
    trainer, args, data = finished_cell(tmp_path, monkeypatch)
    trained = len(trainer.targets)
    trainer.kill_at = 2800
    with pytest.raises(Exception, match="killed"):
        bible_extend.extend(PRE, 3000, data, args)
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring())
    result = bible_extend.extend(PRE, 3000, data, args)
    assert trainer.targets[trained:] == [2750, 3000, 3000] and result["end_update"] == 3000
    assert not list((tmp_path / "w" / "extended").glob("*.partial"))


def test_a_second_extension_of_a_run_being_extended_refuses_in_one_line_and_a_killed_one_leaves_no_lock(
    tmp_path, monkeypatch
):
    trainer, args, data = finished_cell(tmp_path, monkeypatch)
    trained, key = len(trainer.targets), bible_extend.finished_run(PRE, data, args)["key"]
    save_dir = tmp_path / "w" / "extended" / f"pre-e6d6-warmup-seed1-to-3000-{key}"
    with held_elsewhere(save_dir, "bible_extend") as pid:
        with pytest.raises(FolderBusy, match=rf"^{save_dir} is being trained by bible_extend pid {pid} on .*wait"):
            bible_extend.extend(PRE, 3000, data, args)
        assert not save_dir.exists() and len(trainer.targets) == trained  # refused before copying or training
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring())
    assert bible_extend.extend(PRE, 3000, data, args)["end_update"] == 3000  # the kernel released the lock
    assert trainer.targets[trained:] == [2750, 3000]


def test_what_cannot_be_extended_says_why_in_one_line(tmp_path, monkeypatch):
    _, args, data = finished_cell(tmp_path, monkeypatch)
    with pytest.raises(ConfigError, match="ended there; give an earlier or a later update"):
        bible_extend.extend(PRE, 2500, data, args)
    with pytest.raises(ConfigError, match="no average kept at update 2000"):  # FakeTrainer writes no checkpoints
        bible_extend.extend(PRE, 2000, data, args)
    with pytest.raises(ConfigError, match="has not finished under these settings"):
        bible_extend.extend(RunSpec("residual", 6, True, 1), 3000, data, args)
    with pytest.raises(ConfigError, match="not a run of the study's plan"):
        bible_extend.planned("pre-e7d7-warmup-seed1", args)
    with pytest.raises(ConfigError, match="a multiple of --validate-every"):
        bible_extend.parse_args(["--run", "pre-e6d6-warmup-seed1", "--to", "8600"])


def test_a_run_is_scored_at_an_earlier_update_from_the_average_kept_there_and_compared_with_its_cell(
    tmp_path, monkeypatch
):
    trainer, args, data = finished_cell(tmp_path, monkeypatch)
    trained = len(trainer.targets)
    source = tmp_path / "w" / "runs" / bible_extend.run_id(bible_extend.finished_run(POST, data, args))
    kept = bible_study.averaged_at(source, 2000)
    kept.parent.mkdir()
    kept.write_bytes(b"the average of the run's checkpoints up to update 2000")
    decoded = []

    def score_model(databin, model, out_file, args):  # fairseq-generate and scoring's stand-in
        decoded.append(model)
        FakeScoring(REFERENCES, bleu=lambda end: 20.0)(databin, out_file.parent, 2000, args)
        (out_file.parent / "generate-test.out").rename(out_file)
        return {"bleu": 20.0, "sacrebleu": 19.0, "sacrebleu_signature": "sig|case:lc"}

    monkeypatch.setattr(bible_study, "score_model", score_model)
    result = bible_extend.extend(POST, 2000, data, args)
    assert decoded == [kept] and len(trainer.targets) == trained  # scored from the kept average: nothing trained
    assert (result["scored_at"], result["run_end"], result["end_update"], result["bleu"]) == (2000, 2500, 2000, 20.0)
    assert [u for u, _ in result["valid_curve"]][-1] == 2000 and result["best_valid_loss"] == 4.24
    assert {c["name"] for c in result["compared"]} == {"pre-e6d6-warmup-seed1", "post-e6d6-warmup-seed1"}
    readme = (tmp_path / "o" / "extended" / "README.md").read_text()
    assert "Scored at update 2,000 from the averaged model the study kept there (the run ended at 2,500)" in readme
    assert "--run post-e6d6-warmup-seed1 --to 2000`" in readme
    assert bible_extend.extend(POST, 2000, data, args)["bleu"] == 20.0 and decoded == [kept]  # made before: reused


def test_another_update_is_another_extension_trained_from_the_runs_plateau_and_the_first_is_kept(tmp_path, monkeypatch):
    trainer, args, data = finished_cell(tmp_path, monkeypatch)
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring(REFERENCES, bleu=lambda end: end / 100))
    first = bible_extend.extend(PRE, 2750, data, args)
    trained = len(trainer.targets)
    longer = bible_extend.extend(PRE, 3000, data, args)
    assert trainer.targets[trained:] == [2750, 3000]  # from the study's run at 2,500, not from the first extension
    assert (first["bleu"], longer["bleu"]) == (27.5, 30.0)
    readme = (tmp_path / "o" / "extended" / "README.md").read_text()
    assert "## pre-e6d6-warmup-seed1-to-2750" in readme and "## pre-e6d6-warmup-seed1-to-3000" in readme
    other = study_args(tmp_path, "--lr", "1e-3")  # another recipe: its run has not finished, nothing is trained
    with pytest.raises(ConfigError, match="has not finished under these settings"):
        bible_extend.extend(PRE, 3000, data, other)
    assert len(trainer.targets) == trained + 2


def test_a_rerun_compares_the_extension_with_the_runs_of_its_cell_finished_since_and_trains_nothing(
    tmp_path, monkeypatch
):
    trainer, args, data = finished_cell(tmp_path, monkeypatch)
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring())
    made = bible_extend.extend(PRE, 3000, data, args)
    assert {c["name"] for c in made["compared"]} == {"pre-e6d6-warmup-seed1", "post-e6d6-warmup-seed1"}
    residual = RunSpec("residual", 6, True, 1)  # finishes after the extension was made
    bible_study.run_one(residual, data, args, tmp_path / "o" / "runs", tmp_path / "w" / "runs")
    trained = len(trainer.targets)
    again = bible_extend.extend(PRE, 3000, data, args)
    assert len(trainer.targets) == trained and again["bleu"] == made["bleu"]  # nothing trained or decoded again
    compared = {c["name"]: c for c in again["compared"]}
    assert set(compared) == {"pre-e6d6-warmup-seed1", "post-e6d6-warmup-seed1", "residual-e6d6-warmup-seed1"}
    for before in made["compared"]:  # the same draws: the earlier rows are unchanged
        assert compared[before["name"]] == before
    assert compared["residual-e6d6-warmup-seed1"]["p"] is None  # the same translations as the extension: no difference
    out = tmp_path / "o" / "extended"
    record = json.loads(next(out.glob("pre-e6d6-warmup-seed1-to-3000-*.json")).read_text())
    assert {c["name"] for c in record["compared"]} == set(compared)
    assert "| residual-e6d6-warmup-seed1 |" in (out / "README.md").read_text()


def test_a_run_whose_checkpoints_are_gone_is_refused_or_trained_anew_and_checked_against_its_record(
    tmp_path, monkeypatch
):
    trainer, args, data = finished_cell(tmp_path, monkeypatch)
    shutil.rmtree(tmp_path / "w" / "runs")  # the machine that trained the cell is gone; its records are committed
    trained = len(trainer.targets)
    with pytest.raises(
        ConfigError, match="checkpoints are not in --work .*--anew trains it again from update 0 to 3000"
    ):
        bible_extend.extend(PRE, 3000, data, args)
    assert len(trainer.targets) == trained and not (tmp_path / "w" / "extended").exists()
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring(REFERENCES, bleu=lambda end: end / 100))
    result = bible_extend.extend(PRE, 3000, data, args, anew=True)
    assert trainer.targets[trained:] == list(range(250, 3001, 250))  # from update 0
    assert result["from_update"] == 2500 and result["end_update"] == 3000 and result["bleu"] == 30.0
    assert result["trained_anew"] == {"same_curve": True, "largest_difference": 0.0}
    readme = (tmp_path / "o" / "extended" / "README.md").read_text()
    assert (
        "Trained again from update 0 to 3,000, its checkpoints gone (its validation curve up to its plateau at"
        in readme
    )
    assert "2,500 is the record's to the last digit)" in readme and "--to 3000 --anew`" in readme


def test_a_run_trained_anew_that_is_not_its_record_says_how_far_apart(tmp_path, monkeypatch):
    trainer, args, data = finished_cell(tmp_path, monkeypatch)
    shutil.rmtree(tmp_path / "w" / "runs")
    trainer.valid = lambda update: after_plateau(update) + (0.002 if update == 1000 else 0.0)  # another machine's sums
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring())
    result = bible_extend.extend(PRE, 3000, data, args, anew=True)
    assert result["trained_anew"]["same_curve"] is False
    assert result["trained_anew"]["largest_difference"] == pytest.approx(0.002)
    readme = (tmp_path / "o" / "extended" / "README.md").read_text()
    assert "not the record's (losses up to 0.002 apart): another run of its settings" in readme


def test_a_run_trained_anew_and_killed_half_way_resumes_from_its_own_checkpoints_and_stays_marked(
    tmp_path, monkeypatch
):
    trainer, args, data = finished_cell(tmp_path, monkeypatch)
    shutil.rmtree(tmp_path / "w" / "runs")
    trained = len(trainer.targets)
    trainer.kill_at = 1100
    with pytest.raises(Exception, match="killed"):
        bible_extend.extend(PRE, 3000, data, args, anew=True)
    trainer.kill_at = None
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring())
    result = bible_extend.extend(PRE, 3000, data, args, anew=True)
    assert trainer.targets[trained:] == [250, 500, 750, 1000, 1250, *range(1250, 3001, 250)]  # 1,250 again, from 1,000
    assert result["trained_anew"]["same_curve"] and not list((tmp_path / "w" / "extended").glob("*.partial"))


def stuck(update):
    """Post-LN at depth: no progress from the first validation (the rule fails it where the study stops it)."""
    return 9.3


def cell_with_a_failed_run(tmp_path, monkeypatch, nan_at=None):
    """Pre-LN of one cell finished and scored; Post-LN stuck (or NaN at ``nan_at``), failed by the rule, unscored."""
    trainer = FakeTrainer(plateau_curve)
    monkeypatch.setattr(bible_study, "run_training", trainer)
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring())
    args = study_args(tmp_path)
    data = {"databin": "D", "sha256": "d" * 64, "fingerprints": {s: "fp" for s in bible_extend.cell(PRE, args)}}
    records, runs = tmp_path / "o" / "runs", tmp_path / "w" / "runs"
    bible_study.run_one(PRE, data, args, records, runs)
    trainer.valid, trainer.nan_at = stuck, nan_at
    post = bible_study.run_one(POST, data, args, records, runs)
    assert post["fails"] and post["bleu"] is None
    return trainer, args, data, post


def test_a_run_the_rule_failed_without_diverging_is_trained_on_and_scored_if_it_leaves_its_plateau(
    tmp_path, monkeypatch
):
    trainer, args, data, post = cell_with_a_failed_run(tmp_path, monkeypatch)
    assert post["fails"].startswith("no progress") and post["end_update"] == 1000
    trained = len(trainer.targets)
    trainer.valid = lambda update: stuck(update) if update <= 1500 else 4.2  # gets out after 1,500
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring(REFERENCES[:1] + REFERENCES[:3]))
    result = bible_extend.extend(POST, 3000, data, args)
    assert trainer.targets[trained:] == list(range(1250, 3001, 250))  # from where the study stopped it
    assert result["fails"] is None and result["source_fails"] == post["fails"] and result["bleu"] == 12.5
    assert [c["name"] for c in result["compared"]] == ["pre-e6d6-warmup-seed1"]  # the scored runs of its cell
    readme = (tmp_path / "o" / "extended" / "README.md").read_text()
    assert "best validation loss 9.300 where the rule failed it (no progress (loss 9.8 -> 9.8)), 4.200 by" in readme


def test_a_failed_run_still_stuck_at_the_update_asked_is_not_scored_and_a_diverged_one_is_refused(
    tmp_path, monkeypatch
):
    trainer, args, data, post = cell_with_a_failed_run(tmp_path, monkeypatch)
    result = bible_extend.extend(POST, 2000, data, args)
    assert result["end_update"] == 2000 and result["fails"].startswith("no progress") and result["bleu"] is None
    assert result["compared"] == []
    readme = (tmp_path / "o" / "extended" / "README.md").read_text()
    assert "not scored: the rule still fails it by update 2,000 (no progress (loss 9.8 -> 9.8))." in readme

    trainer, args, data, post = cell_with_a_failed_run(tmp_path / "nan", monkeypatch, nan_at=700)
    assert post["fails"] == "loss became NaN (fairseq stopped)"
    with pytest.raises(ConfigError, match="post-e6d6-warmup-seed1: it diverged .loss became NaN.*no later update"):
        bible_extend.extend(POST, 2000, data, args)


def test_an_extension_another_process_ended_while_this_one_reached_for_the_lock_is_reused_not_scored_again(
    tmp_path, monkeypatch
):
    trainer, args, data = finished_cell(tmp_path, monkeypatch)
    monkeypatch.setattr(bible_study, "average_and_score", FakeScoring(REFERENCES, bleu=lambda end: end / 100))
    made = bible_extend.extend(PRE, 3000, data, args)
    trained = len(trainer.targets)
    done = next((tmp_path / "o" / "extended").glob("pre-e6d6-warmup-seed1-to-3000-*.json"))
    record = done.read_bytes()
    done.unlink()
    lock = bible_study.training_lock

    def ended_meanwhile(save_dir, who="bible_study"):
        done.write_bytes(record)  # the other extension's record, written between this one's look and its lock
        return lock(save_dir, who)

    def scored_again(*args):
        raise AssertionError("the extension was averaged and scored a second time")

    monkeypatch.setattr(bible_study, "training_lock", ended_meanwhile)
    monkeypatch.setattr(bible_study, "average_and_score", scored_again)
    assert bible_extend.extend(PRE, 3000, data, args)["bleu"] == made["bleu"] == 30.0
    assert len(trainer.targets) == trained
