"""Checkpoint averaging (``fairseq-residual-average-checkpoints``, and ``evaluate.sh --average``): the output's model
is the independent average of the inputs' state dicts, the rest is the newest input's; fairseq's options choose the
inputs."""

import random
import re

import pytest
import torch
from helpers import PLUGIN_DIR, TinyTask, build_model, run_cli

from fairseq_residual.model import SCHEME_KEY
from fairseq_residual_tools import console
from fairseq_residual_tools.average_checkpoints import (
    chosen_inputs,
    fill_update_checkpoint,
    main,
    numbered_checkpoints,
    write_average,
)
from fairseq_residual_tools.errors import DataError
from fairseq_residual_tools.kill_stress import start_training, train_command, wait_or_kill


def save_checkpoint(path, model_state, updates):
    """The fields of a fairseq-train checkpoint that averaging reads or keeps."""
    torch.save(
        {
            "model": model_state,
            "cfg": {"task": {"data": f"data-of-{path.name}"}},
            "optimizer_history": [{"num_updates": updates}],
            "extra_state": {"epoch": updates // 10},
            "last_optimizer_state": {"state": {0: {"exp_avg": torch.ones(3)}}},
        },
        path,
    )
    return path


def model_states(n, dtype=torch.float32):
    """``n`` state dicts of one tiny model (the scheme's integer tag among the tensors), different weights."""
    states = []
    for seed in range(n):
        torch.manual_seed(seed)
        state = build_model(TinyTask(), scheme="residual").state_dict()
        states.append({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()})
    return states


def independent_average(states):
    """Written from the definition: the elementwise mean of each floating-point tensor, in float64."""
    floating = [k for k in states[0] if states[0][k].is_floating_point()]
    return {k: torch.stack([s[k].double() for s in states]).mean(dim=0) for k in floating}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_output_model_is_the_mean_of_the_inputs_and_the_rest_is_the_newest_inputs(tmp_path, dtype):
    states = model_states(3, dtype)
    updates = [30, 10, 20]  # the newest is not the last given
    paths = [save_checkpoint(tmp_path / f"c{i}.pt", s, u) for i, (s, u) in enumerate(zip(states, updates))]
    out = tmp_path / "avg.pt"
    assert main(["--inputs", *map(str, paths), "--output", str(out)]) == 0
    averaged = torch.load(out, weights_only=True)  # a plain fairseq checkpoint (the plugin's allowlist)
    expected = independent_average(states)
    assert set(averaged["model"]) == set(states[0]) and SCHEME_KEY in averaged["model"]
    for k, v in averaged["model"].items():
        assert v.dtype == states[0][k].dtype and v.shape == states[0][k].shape
        if k in expected:
            assert torch.equal(v, expected[k].to(dtype)), k
        else:
            assert torch.equal(v, states[0][k]), k  # the newest input's (the scheme's tag)
    assert averaged["optimizer_history"] == [{"num_updates": 30}] and averaged["extra_state"] == {"epoch": 3}
    assert averaged["cfg"] == {"task": {"data": "data-of-c0.pt"}}
    assert "last_optimizer_state" not in averaged
    assert any(not torch.equal(states[0][k], states[1][k]) for k in expected)  # the inputs differ


def folder_of_checkpoints(folder, names):
    state = model_states(1)[0]
    for name in names:
        save_checkpoint(folder / name, state, updates=1)
    return folder


def test_num_epoch_and_num_update_checkpoints_take_the_newest_by_number(tmp_path):
    names = ["checkpoint2.pt", "checkpoint9.pt", "checkpoint10.pt", "checkpoint11.pt", "checkpoint_last.pt"]
    names += ["checkpoint_best.pt", "checkpoint_3_500.pt", "checkpoint_11_4000.pt", "checkpoint_4_1000.pt"]
    random.Random(0).shuffle(names)
    folder = folder_of_checkpoints(tmp_path, names)

    def chosen(kind, n, upper_bound=None):
        return [p.name for p in chosen_inputs([str(folder)], kind, n, upper_bound)]

    assert chosen("epoch", 3) == ["checkpoint11.pt", "checkpoint10.pt", "checkpoint9.pt"]  # by number, not by name
    assert chosen("epoch", 2, upper_bound=10) == ["checkpoint10.pt", "checkpoint9.pt"]
    assert chosen("update", 2) == ["checkpoint_11_4000.pt", "checkpoint_4_1000.pt"]
    assert chosen("update", 1, upper_bound=999) == ["checkpoint_3_500.pt"]


def test_fewer_checkpoints_than_asked_and_other_mistakes_are_one_line(tmp_path, monkeypatch, capsys):
    folder = folder_of_checkpoints(tmp_path, ["checkpoint1.pt", "checkpoint2.pt", "checkpoint_1_100.pt"])
    out = str(tmp_path / "avg.pt")
    mistakes = {
        ("--inputs", str(folder), "--num-epoch-checkpoints", "5"): (
            f"--num-epoch-checkpoints 5: {folder} holds 2 epoch checkpoints (checkpoint2.pt, checkpoint1.pt)"
        ),
        ("--inputs", str(folder), "--num-update-checkpoints", "2", "--checkpoint-upper-bound", "50"): (
            f"--num-update-checkpoints 2: {folder} holds 0 update checkpoints up to update 50 (none)"
        ),
        ("--inputs", str(folder / "checkpoint1.pt"), "--num-epoch-checkpoints", "1"): (
            f"--num-epoch-checkpoints takes one folder in --inputs (a --save-dir), not {folder / 'checkpoint1.pt'}"
        ),
        ("--inputs", str(folder / "checkpoint1.pt"), "--checkpoint-upper-bound", "3"): (
            "--checkpoint-upper-bound needs --num-epoch-checkpoints or --num-update-checkpoints"
        ),
        ("--inputs", str(folder), "--num-epoch-checkpoints", "0"): "--num-epoch-checkpoints 0: give at least 1",
    }
    for argv, message in mistakes.items():
        monkeypatch.setattr("sys.argv", ["fairseq-residual-average-checkpoints", *argv, "--output", out])
        assert console.average_checkpoints() == 1
        assert capsys.readouterr().err == f"error: {message}\n"
    other = save_checkpoint(tmp_path / "other.pt", {"w": torch.zeros(2)}, updates=1)
    with pytest.raises(DataError, match=f"{other} has other parameters than {folder / 'checkpoint1.pt'}"):
        main(["--inputs", str(folder / "checkpoint1.pt"), str(other), "--output", out])
    assert not (tmp_path / "avg.pt").exists()


def test_an_interrupted_average_leaves_the_previous_file_whole(tmp_path, monkeypatch):
    paths = [save_checkpoint(tmp_path / f"c{i}.pt", s, i) for i, s in enumerate(model_states(2))]
    out = write_average(paths, tmp_path / "avg.pt")
    before = out.read_bytes()

    def killed_mid_write(obj, path):
        with open(path, "wb") as f:
            f.write(before[:100])
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", killed_mid_write)
    with pytest.raises(KeyboardInterrupt):
        write_average(paths, out)
    assert out.read_bytes() == before and [p.name for p in tmp_path.glob("avg.pt*")] == ["avg.pt"]


@pytest.mark.slow
def test_an_average_of_a_trainings_update_checkpoints_translates_with_fairseq_generate(demo_databin, tmp_path):
    save_dir = tmp_path / "ckpt"
    argv = train_command(demo_databin.databin, save_dir, "small", max_update=3)
    _, status, text = wait_or_kill(start_training(argv, tmp_path / "train.log"), tmp_path / "train.log", 0)
    assert status == 0, text[-3000:]
    out = tmp_path / "avg.pt"
    assert main(["--inputs", str(save_dir), "--num-update-checkpoints", "2", "--output", str(out)]) == 0
    inputs = [torch.load(save_dir / f"checkpoint_1_{u}.pt", weights_only=True) for u in (2, 3)]
    averaged = torch.load(out, weights_only=True)
    for k, mean in independent_average([s["model"] for s in inputs]).items():
        assert torch.equal(averaged["model"][k], mean.to(averaged["model"][k].dtype)), k
    assert averaged["optimizer_history"] == inputs[1]["optimizer_history"]
    command = ["fairseq_cli.generate", str(demo_databin.databin), "--user-dir", PLUGIN_DIR, "--path", str(out)]
    generated = run_cli([*command, "--cpu", "--beam", "2", "--max-len-b", "5"], cwd=tmp_path).stdout
    assert len(re.findall(r"^H-\d+\t", generated, flags=re.M)) == 40


def test_the_update_that_ends_an_epoch_gets_its_update_checkpoint_from_checkpoint_last(demo_databin, tmp_path):
    save_dir = tmp_path / "ckpt"
    argv = train_command(demo_databin.databin, save_dir, "small", max_update=0, max_epoch=1)
    _, status, text = wait_or_kill(start_training(argv, tmp_path / "train.log"), tmp_path / "train.log", 0)
    assert status == 0, text[-3000:]
    last = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)
    end = last["optimizer_history"][-1]["num_updates"]
    numbered = [n for _, n in numbered_checkpoints(save_dir, "update")]
    assert numbered[0] == end - 1  # fairseq saved every update (--save-interval-updates 1) but the epoch's last

    filled = fill_update_checkpoint(save_dir, end)
    assert filled == save_dir / f"checkpoint_1_{end}.pt"  # named for the epoch that ended, as fairseq names them
    assert numbered_checkpoints(save_dir, "update")[0] == (filled, end)
    copy = torch.load(filled, weights_only=True)
    assert copy["optimizer_history"] == last["optimizer_history"]
    assert all(torch.equal(copy["model"][k], v) for k, v in last["model"].items())
    assert not list(save_dir.glob("*.tmp"))
    assert fill_update_checkpoint(save_dir, end) is None  # already there: nothing written
    assert fill_update_checkpoint(save_dir, end + 1) is None  # checkpoint_last.pt holds another update
