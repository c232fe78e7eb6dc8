"""``--tensorboard-logdir`` with the plugin (the ``tensorboard`` extra): a tiny training writes event files whose
train and valid losses are the ones its JSON log prints."""

import json

import pytest
from helpers import run_cli, train_args
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

pytestmark = pytest.mark.slow  # runs fairseq-train


def scalars(folder):
    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_a_tiny_training_writes_train_and_valid_loss_to_tensorboard(demo_databin, tmp_path):
    logdir = tmp_path / "tensorboard"
    args = train_args(demo_databin.databin, tmp_path / "ckpt", max_update=6)
    proc = run_cli([*args, "--tensorboard-logdir", str(logdir), "--log-interval", "2", "--no-save"], cwd=tmp_path)
    log = proc.stdout + proc.stderr
    assert "tensorboard not found" not in log
    records = [json.loads(line[line.index("{") :]) for line in log.splitlines() if '{"epoch"' in line]
    inner = [r for r in records if "loss" in r]  # train_inner: every --log-interval updates
    valid = [r for r in records if "valid_loss" in r]  # at every --save-interval-updates (4) and the end
    (train,) = [r for r in records if "train_loss" in r]

    assert sorted(p.name for p in logdir.iterdir()) == ["train", "train_inner", "valid"]
    steps_losses = scalars(logdir / "train_inner")["loss"]
    assert [step for step, _ in steps_losses] == [int(r["num_updates"]) for r in inner] == [2, 4, 6]
    assert [round(v, 3) for _, v in steps_losses] == [float(r["loss"]) for r in inner]
    assert scalars(logdir / "train")["loss"] == [(6, pytest.approx(float(train["train_loss"]), abs=5e-4))]
    assert [(step, round(v, 3)) for step, v in scalars(logdir / "valid")["loss"]] == [
        (int(r["valid_num_updates"]), float(r["valid_loss"])) for r in valid
    ]
    assert [int(r["valid_num_updates"]) for r in valid] == [4, 6]
