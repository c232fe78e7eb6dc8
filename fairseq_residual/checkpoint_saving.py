"""Checkpoint files that are complete after a kill at any instant (SIGKILL, SLURM preemption, scancel).

fairseq writes the first file of a save through ``<file>.tmp`` and a rename (without fsync), then
makes ``checkpoint_last.pt``, ``checkpoint_best.pt`` and the other files of the same save with a
plain copy onto the final name. A kill during that copy leaves a truncated ``checkpoint_last.pt``
(observed: 37 of 45 MB), and every later start dies loading it. Loading the plugin makes every
checkpoint file that training writes (numbered, epoch, last, best, ``checkpoint.best_*``) appear
only complete: written or copied into ``<file>.tmp`` in the same folder, fsync'ed,
then renamed over the final name with ``os.replace`` (atomic on POSIX), and the folder fsync'ed
so that the rename itself survives a crash of the node; a failing ``torch.save`` is tried three
times, as fairseq does. Each checkpoint path therefore holds
either its previous complete version or the new one. ``.tmp`` files left by a kill are removed
when training starts again, with one log line.

Paths that fairseq routes through iopath (``manifold://`` ...) and asynchronous writes are left to
fairseq.
"""

import contextlib
import functools
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import torch
from fairseq import checkpoint_utils
from fairseq.file_io import PathManager

logger = logging.getLogger(__name__)

#: what fairseq itself appends to a checkpoint being written, so that its leftovers are found too
TMP_SUFFIX = ".tmp"

#: tries of a checkpoint save, as fairseq's ``_torch_persistent_save``
SAVE_ATTEMPTS = 3


def write_atomically(path: str, write: Callable[[str], Any]) -> None:
    """``write(tmp)`` creates the file ``tmp``; ``path`` then holds that content in full, or is unchanged."""
    tmp = path + TMP_SUFFIX
    try:
        write(tmp)
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
    _fsync(os.path.dirname(os.path.abspath(path)))


def _fsync(path: str) -> None:
    """Flush a file's or a folder's data to the disk (a read-only descriptor is enough on POSIX)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_local(*paths: str) -> bool:
    return not any(PathManager.path_requires_pathmanager(p) for p in paths)


def _atomic_torch_persistent_save(torch_persistent_save):
    @functools.wraps(torch_persistent_save)
    def save(obj, filename: str, async_write: bool = False):
        if async_write or not _is_local(filename):
            return torch_persistent_save(obj, filename, async_write=async_write)
        for attempt in range(SAVE_ATTEMPTS):  # fairseq's own save retries a failing torch.save this often
            try:
                return write_atomically(filename, lambda tmp: torch.save(obj, tmp))
            except Exception:
                if attempt == SAVE_ATTEMPTS - 1:
                    raise
                logger.exception(f"saving {filename} failed (attempt {attempt + 1} of {SAVE_ATTEMPTS}); retrying")

    save.fairseq_residual = True  # type: ignore[attr-defined]  # the mark that it is applied
    return save


class _AtomicCopyPathManager:
    """fairseq's ``PathManager`` as ``checkpoint_utils`` sees it, with ``copy`` made atomic.

    ``checkpoint_utils.save_checkpoint`` makes the second and later files of a save (last, best,
    ...) with ``PathManager.copy``; everything else is fairseq's own ``PathManager``.
    """

    fairseq_residual = True

    def __init__(self, path_manager):
        self._path_manager = path_manager

    def __getattr__(self, name):
        return getattr(self._path_manager, name)

    def copy(self, src_path: str, dst_path: str, overwrite: bool = False) -> bool:
        if not _is_local(src_path, dst_path):
            return self._path_manager.copy(src_path, dst_path, overwrite=overwrite)
        if not overwrite and os.path.exists(dst_path):
            return False  # as iopath's copy does
        write_atomically(dst_path, lambda tmp: shutil.copyfile(src_path, tmp))
        return True


def remove_leftover_temporary_files(save_dir: str) -> list:
    """Delete the ``checkpoint*.pt.tmp`` files a killed save left in ``save_dir``; returns their paths."""
    leftovers = sorted(Path(save_dir).glob(f"checkpoint*.pt{TMP_SUFFIX}")) if os.path.isdir(save_dir) else []
    for path in leftovers:
        path.unlink(missing_ok=True)
    if leftovers:
        names = ", ".join(p.name for p in leftovers)
        logger.info(f"removed {len(leftovers)} temporary file(s) left in {save_dir} by an interrupted save: {names}")
    return leftovers


def _cleaning_load_checkpoint(load_checkpoint):
    """Training's start (``checkpoint_utils.load_checkpoint``) first removes a killed save's leftovers."""

    @functools.wraps(load_checkpoint)
    def load(cfg, trainer, **passthrough_args):
        if trainer.should_save_checkpoint_on_current_rank and _is_local(cfg.save_dir):
            remove_leftover_temporary_files(cfg.save_dir)
        return load_checkpoint(cfg, trainer, **passthrough_args)

    load.fairseq_residual = True  # type: ignore[attr-defined]  # the mark that it is applied
    return load


def apply() -> None:
    if not getattr(checkpoint_utils.torch_persistent_save, "fairseq_residual", False):
        checkpoint_utils.torch_persistent_save = _atomic_torch_persistent_save(checkpoint_utils.torch_persistent_save)
    if not getattr(checkpoint_utils.PathManager, "fairseq_residual", False):
        checkpoint_utils.PathManager = _AtomicCopyPathManager(checkpoint_utils.PathManager)
    if not getattr(checkpoint_utils.load_checkpoint, "fairseq_residual", False):
        checkpoint_utils.load_checkpoint = _cleaning_load_checkpoint(checkpoint_utils.load_checkpoint)
