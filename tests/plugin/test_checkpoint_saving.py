"""A SIGKILL at any instant of a checkpoint save leaves every checkpoint file complete, and training resumes."""

import os
import re
import shutil
import signal

import pytest
import torch

from fairseq_residual import checkpoint_saving
from fairseq_residual_tools.kill_stress import start_training, train_command, unreadable_checkpoints, wait_or_kill


def _die_halfway_through_the_second_copy_to_checkpoint_last():
    """In the training process: the 2nd copy made for checkpoint_last.pt writes half the bytes, then SIGKILL.

    fairseq copies ``checkpoint_last.pt`` with ``shutil.copyfile`` onto the final name; the plugin
    copies into ``checkpoint_last.pt.tmp`` with the same function. Either way the kill lands inside it.
    """
    copyfile, calls = shutil.copyfile, []

    def dying_copyfile(src, dst, *args, **kwargs):
        if os.path.basename(dst).startswith("checkpoint_last"):
            calls.append(dst)
            if len(calls) == 2:
                data = open(src, "rb").read()
                with open(dst, "wb") as f:
                    f.write(data[: len(data) // 2])
                os.kill(os.getpid(), signal.SIGKILL)
        return copyfile(src, dst, *args, **kwargs)

    shutil.copyfile = dying_copyfile


@pytest.mark.slow
def test_a_kill_inside_the_copy_to_checkpoint_last_leaves_the_previous_complete_file(demo_databin, tmp_path):
    save_dir, log = tmp_path / "ckpt", tmp_path / "train.log"
    argv = train_command(demo_databin.databin, save_dir, "small", max_update=4)
    pid = start_training(argv, log, in_child=_die_halfway_through_the_second_copy_to_checkpoint_last)
    killed, status, text = wait_or_kill(pid, log, 0)
    assert (killed, status) == (False, -signal.SIGKILL), text[-2000:]
    assert text.count("Saving checkpoint to") == 2 and "checkpoint_1_2.pt" in text
    # the numbered file of update 2 is complete; checkpoint_last.pt still holds update 1 in full
    assert unreadable_checkpoints(save_dir) == []
    last = torch.load(save_dir / "checkpoint_last.pt", map_location="cpu")
    assert last["optimizer_history"][-1]["num_updates"] == 1
    assert [p.name for p in save_dir.glob("*.tmp")] == ["checkpoint_last.pt.tmp"]

    offset = log.stat().st_size
    killed, status, text = wait_or_kill(start_training(argv, log), log, offset)
    assert status == 0, text[-3000:]
    assert re.search(r"removed 1 temporary file\(s\) left in .* by an interrupted save: checkpoint_last\.pt\.tmp", text)
    assert re.search(r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch 1 @ 1 updates\)", text)
    assert not list(save_dir.glob("*.tmp"))
    assert torch.load(save_dir / "checkpoint_last.pt", map_location="cpu")["optimizer_history"][-1]["num_updates"] == 4


def test_an_interrupted_atomic_write_keeps_the_old_file_and_removes_its_temporary_file(tmp_path):
    path = tmp_path / "checkpoint_last.pt"
    path.write_bytes(b"old")

    def fail_halfway(tmp):
        with open(tmp, "wb") as f:
            f.write(b"ne")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        checkpoint_saving.write_atomically(str(path), fail_halfway)
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_last.pt"]
    checkpoint_saving.write_atomically(str(path), lambda tmp: open(tmp, "wb").write(b"new"))
    assert path.read_bytes() == b"new" and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_last.pt"]


def test_leftover_temporary_files_are_removed_and_nothing_else(tmp_path):
    for name in ("checkpoint_last.pt.tmp", "checkpoint_3_40.pt.tmp", "checkpoint_last.pt", "notes.tmp"):
        (tmp_path / name).write_bytes(b"x")
    removed = checkpoint_saving.remove_leftover_temporary_files(str(tmp_path))
    assert sorted(p.name for p in removed) == ["checkpoint_3_40.pt.tmp", "checkpoint_last.pt.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_last.pt", "notes.tmp"]


def test_a_failing_torch_save_is_retried_three_times_as_fairseq_does(tmp_path, monkeypatch):
    from fairseq import checkpoint_utils

    real_save, calls = torch.save, []

    def flaky_save(obj, path):
        calls.append(path)
        if len(calls) <= failures:
            with open(path, "wb") as f:
                f.write(b"partial")
            raise OSError("transient write error")
        real_save(obj, path)

    monkeypatch.setattr(torch, "save", flaky_save)
    target = tmp_path / "checkpoint_last.pt"
    failures = 2  # the third try succeeds
    checkpoint_utils.torch_persistent_save({"w": torch.ones(2)}, str(target))
    assert len(calls) == 3 and torch.equal(torch.load(target)["w"], torch.ones(2))
    calls.clear()
    failures = 3  # every try fails: the error reaches fairseq, the previous file stays whole
    with pytest.raises(OSError, match="transient write error"):
        checkpoint_utils.torch_persistent_save({"w": torch.zeros(2)}, str(target))
    assert len(calls) == 3 and torch.equal(torch.load(target)["w"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint_last.pt"]
