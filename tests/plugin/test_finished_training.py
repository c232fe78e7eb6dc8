"""A finished training run again loads, says in one line that nothing is left to do, trains no update and writes no
file; a plateau schedule resumed at an epoch's end goes on as without the stop (``fairseq_residual.finished_training``).
"""

import pytest
import torch
from helpers import run_cli, train_args

from fairseq_residual.finished_training import NOTHING_LEFT
from fairseq_residual_tools.kill_stress import file_states, start_training, train_command, wait_or_kill

#: 4096 tokens: 7 updates per epoch of the demo data-bin
MAX_TOKENS = 4096
#: the learning rate falls tenfold after the first epoch that does not halve the validation loss (the 2nd)
PLATEAU = [
    *("--lr-scheduler", "reduce_lr_on_plateau", "--lr-shrink", "0.1", "--lr-patience", "0"),
    *("--lr-threshold", "0.5"),
]


def run(argv, log):
    """One start to its end; its log text."""
    offset = log.stat().st_size if log.exists() else 0
    killed, status, text = wait_or_kill(start_training(argv, log), log, offset)
    assert (killed, status) == (False, 0), text[-3000:]
    return text


def state(save_dir):
    last = torch.load(save_dir / "checkpoint_last.pt", map_location="cpu")
    return last["optimizer_history"][-1]["num_updates"], last


@pytest.mark.slow
@pytest.mark.parametrize(
    "budget, updates",
    [(["--max-update", "3"], 3), (["--max-update", "0", "--max-epoch", "1"], 7)],
    ids=["update", "epoch"],
)
def test_a_finished_training_run_again_trains_nothing_writes_nothing_and_says_so_in_one_line(
    demo_databin, tmp_path, budget, updates
):
    save_dir, log = tmp_path / "ckpt", tmp_path / "train.log"
    argv = train_command(demo_databin.databin, save_dir, "small", 0, max_tokens=MAX_TOKENS) + budget
    run(argv, log)
    assert state(save_dir)[0] == updates
    before, folder_time = file_states(save_dir), save_dir.stat().st_mtime_ns
    for _ in range(2):
        text = run(argv, log)
        # the line, and nothing of fairseq's (the forked start's notice that the plugin is imported comes before)
        said = [line for line in text.splitlines() if "has already been imported" not in line]
        assert len(said) == 1 and NOTHING_LEFT in said[0], text[-3000:]
        assert f"{save_dir} (checkpoint_best.pt, checkpoint_last.pt)" in said[0]
        assert f"{budget[-2]} {budget[-1]} reached ({updates} updates)" in said[0]
        assert "num_updates=" not in text and "Saving checkpoint" not in text  # no update, no save
        assert file_states(save_dir) == before  # the same bytes, not even rewritten
        assert save_dir.stat().st_mtime_ns == folder_time  # no file made and removed in it either


@pytest.mark.slow
def test_stop_min_lr_on_a_plateau_stays_stopped_and_resumed_the_schedule_goes_on_as_without_the_stop(
    demo_databin, tmp_path
):
    """The plateau step after epoch 2 (lr 1e-3 -> 1e-4) runs after that epoch's save: a re-run must find the training
    finished by --stop-min-lr 1e-4 and say so in one line, and resuming it without that stop must train epoch 3 at
    1e-4 as a run of three epochs does."""
    runs = {}
    for name in ("stopped", "straight"):
        save_dir, log = tmp_path / name, tmp_path / f"{name}.log"
        base = train_command(demo_databin.databin, save_dir, "small", 0, max_tokens=MAX_TOKENS) + PLATEAU
        if name == "stopped":
            first = run([*base, "--stop-min-lr", "1e-4"], log)
            assert "stopping training because current learning rate (0.0001)" in first
            assert state(save_dir)[0] == 14  # two epochs
            before, folder_time = file_states(save_dir), save_dir.stat().st_mtime_ns
            again = run([*base, "--stop-min-lr", "1e-4"], log)
            said = [line for line in again.splitlines() if "has already been imported" not in line]
            assert len(said) == 1, again[-3000:]  # known from the saved state, before fairseq's start-up lines
            assert "the learning rate 0.0001 is at or below --stop-min-lr 0.0001 (14 updates)" in said[0]
            assert "num_updates=" not in again and file_states(save_dir) == before
            assert save_dir.stat().st_mtime_ns == folder_time
        text = run([*base, "--max-epoch", "3"], log)
        assert "epoch 003:      7 / 7" in text and "lr=0.0001," in text.split("begin training epoch 3")[-1]
        runs[name] = state(save_dir)
    (updates, straight), (resumed_updates, resumed) = runs["straight"], runs["stopped"]
    assert updates == resumed_updates == 21
    torch.testing.assert_close(resumed["model"], straight["model"], rtol=0, atol=0)
    torch.testing.assert_close(resumed["last_optimizer_state"], straight["last_optimizer_state"], rtol=0, atol=0)
    schedule = [r["optimizer_history"][-1]["lr_scheduler_state"]["best"] for r in (resumed, straight)]
    assert schedule[0] == schedule[1]  # the best validation loss it compares with


@pytest.mark.slow
def test_a_finished_training_run_as_python_m_fairseq_cli_train_trains_nothing(demo_databin, tmp_path):
    """``python -m fairseq_cli.train`` (how the demo and the studies start fairseq) runs the epoch loop from the
    module ``__main__``, not from an imported ``fairseq_cli.train``: a re-run stops there too."""
    save_dir = tmp_path / "ckpt"
    run_cli(train_args(demo_databin.databin, save_dir, max_update=3), cwd=tmp_path, fresh=True)
    before, folder_time = file_states(save_dir), save_dir.stat().st_mtime_ns
    proc = run_cli(train_args(demo_databin.databin, save_dir, max_update=3), cwd=tmp_path, fresh=True)
    text = proc.stdout + proc.stderr
    lines = text.splitlines()
    assert sum(NOTHING_LEFT in line for line in lines) == 1 and len(lines) <= 2, text[-3000:]
    assert save_dir.stat().st_mtime_ns == folder_time
    assert "num_updates: 4" not in text and "Saving checkpoint" not in text, text[-3000:]
    assert file_states(save_dir) == before and state(save_dir)[0] == 3
