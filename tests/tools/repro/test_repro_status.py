"""A cell's state comes from the evidence in its folder: launch markers, exit statuses, the log."""

import json

import pytest

from fairseq_residual_tools.repro.status import FAILED, FAILS, NOT_RUN, RUNNING, TRAINED, training_state

LAUNCH = "### 2026-12-01 05:00:00 launch: python -m fairseq_residual_tools.repro.distributed_train ...\n"
PROGRESS = "".join(
    f"[train_inner][INFO] - epoch 001:  {u} / 90 loss={x}, nll_loss=1, num_updates={u}, lr=0.001\n"
    for u, x in ((10, 11.0), (20, 9.0), (30, 8.0), (40, 7.0), (50, 6.5))
)
MAX_UPDATE = "[fairseq_cli.train][INFO] - Stopping training due to num_updates: 50 >= max_update: 50\n"
DONE = "[fairseq_cli.train][INFO] - done training in 12.3 seconds\n"
NO_DATA = (
    "Traceback (most recent call last):\n  File ...\n"
    "FileNotFoundError: [Errno 2] No such file or directory: '/data/bin/dict.de.txt'\n"
)


def cell(tmp_path, log=None, returncodes=None, signal=None):
    if log is not None:
        (tmp_path / "train.log").write_text(log)
    if returncodes is not None:
        records = [{"returncode": rc, "signal": None} for rc in returncodes]
        if signal:
            records[-1]["signal"] = signal
        (tmp_path / "launch.json").write_text(json.dumps(records))
    return training_state(tmp_path)


def test_no_log_is_not_run(tmp_path):
    assert training_state(tmp_path / "nothing") == training_state(tmp_path) and training_state(tmp_path).name == NOT_RUN


def test_a_launch_without_a_record_is_running_or_interrupted(tmp_path):
    # the launcher writes its record after fairseq exits: none yet means running, or killed with its launcher
    state = cell(tmp_path, LAUNCH + PROGRESS)
    assert state.name == RUNNING and state.describe() == "running or interrupted"
    # a second launch (a resumption) that has not ended yet, after a first one that has
    state = cell(tmp_path, LAUNCH + PROGRESS + LAUNCH, returncodes=[137, None])
    assert state.name == RUNNING and state.detail == "the last launch has not ended (or was killed with its launcher)"
    # a launch killed with its launcher, then a resumption that finished
    assert cell(tmp_path, LAUNCH + LAUNCH + PROGRESS + DONE, returncodes=[None, 0]).name == TRAINED


def test_a_launch_that_exited_1_is_failed_with_its_last_log_line(tmp_path):
    # the issue: this cell (no data, no checkpoint) was listed as "trained, not evaluated"
    state = cell(tmp_path, LAUNCH + NO_DATA, returncodes=[1])
    assert (state.name, state.returncode) == (FAILED, 1) and state.describe() == "failed (exit 1)"
    assert state.detail == "FileNotFoundError: [Errno 2] No such file or directory: '/data/bin/dict.de.txt'"


@pytest.mark.parametrize(
    "returncode, signal, by", [(137, None, "exit 137"), (-9, None, "SIGKILL"), (1, "SIGTERM", "SIGTERM")]
)
def test_a_launch_stopped_by_a_signal_is_interrupted_and_resumable(tmp_path, returncode, signal, by):
    state = cell(tmp_path, LAUNCH + PROGRESS, returncodes=[returncode], signal=signal)
    assert state.name == RUNNING and state.detail == f"the last launch was stopped by {by}"


def test_trained_means_fairseq_finished_and_says_why(tmp_path):
    state = cell(tmp_path, LAUNCH + PROGRESS + LAUNCH + PROGRESS + MAX_UPDATE + DONE, returncodes=[-15, 0])
    assert (state.name, state.detail, state.describe()) == (TRAINED, "max_update reached", "trained, not evaluated")
    early = "[fairseq_cli.train][INFO] - early stop since valid performance hasn't improved for last 20 runs\n"
    assert cell(tmp_path, LAUNCH + PROGRESS + early + DONE, returncodes=[0]).detail == "early stop (patience)"
    assert cell(tmp_path, LAUNCH + PROGRESS + DONE, returncodes=[0]).detail == "max_epoch reached"
    # a launch that found the training finished (killed after its last save) says why in the plugin's line
    again = "[fairseq_residual.finished_training][INFO] - nothing left to do: --max-update 50 reached (50 updates)\n"
    state = cell(tmp_path, LAUNCH + PROGRESS + MAX_UPDATE + LAUNCH + again, returncodes=[137, 0])  # its one line
    assert (state.name, state.detail) == (TRAINED, "max_update reached")
    # exit 0 without fairseq's own end line is not a finished training
    state = cell(tmp_path, LAUNCH + PROGRESS, returncodes=[0])
    assert state.name == FAILED and state.detail.startswith("fairseq did not log 'done training'")


def test_a_diverged_log_is_fails_once_a_launch_ended(tmp_path):
    nan = PROGRESS.replace("loss=6.5", "loss=nan")
    assert cell(tmp_path, LAUNCH + nan).name == RUNNING  # still running: too early to judge
    state = cell(tmp_path, LAUNCH + nan, returncodes=[1])
    assert state.name == FAILS and "NaN" in state.detail
    # a curve cut off by preemption early on is not judged (it would read "no progress")
    flat = LAUNCH + PROGRESS.replace("loss=6.5", "loss=10.9").replace("loss=7.0", "loss=10.9")
    assert cell(tmp_path, flat, returncodes=[0]).name == FAILS
    assert cell(tmp_path, flat, returncodes=[-15]).name == RUNNING
