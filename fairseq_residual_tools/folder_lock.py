"""One trainer per folder of checkpoints: ``held`` takes an flock on a lock file while a training writes there, so a
second trainer of the same folder (another launch, another invocation of a study on the same ``--work``) is told
who holds it instead of writing the same checkpoints. The kernel releases an flock when its process ends, however it
ends, so a killed trainer never leaves a folder locked."""

import fcntl
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from .errors import UserError


class FolderBusy(UserError):
    """The folder's lock is held by another process; the message names the folder and the holder."""


@contextmanager
def held(folder: Path, lock_file: Path, who: str):
    """Hold ``lock_file`` (created with its folder) while the block trains in ``folder``; ``who`` (e.g. "launch")
    names this process to a trainer refused meanwhile. Raises ``FolderBusy`` at once when another process holds it."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a+", encoding="utf-8") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise FolderBusy(
                f"{folder} is being trained by {holder} ({lock_file}): wait for it to end or stop it; "
                "two trainings would write the same checkpoints"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{who} pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        lock.flush()
        yield
