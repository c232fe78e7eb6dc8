"""A finished training stays finished: the same ``fairseq-train`` command run again does nothing and says so.

fairseq's train loop checks ``--max-update`` (and ``--stop-time-hours``) only after an update. Run again on a
training that reached its budget, it loads the last checkpoint, trains one more update, saves and stops ("num_updates:
151 >= max_update: 150"): each re-run adds one, so a kill after the last save, a scheduler's requeue or a script run
twice changed the final model. A training that stopped by ``--stop-min-lr`` under ``reduce_lr_on_plateau`` trained
on too: the epoch's plateau step that took the learning rate below the minimum runs after the epoch's save, so the
checkpoint holds the learning rate before it. Loading the plugin changes two things:

* resuming from a checkpoint saved at an epoch's end first takes the step the learning-rate schedule took after that
  save (``trainer.lr_step(epoch, val_loss)`` with the validation loss saved in it), as the uninterrupted run did: a
  plateau schedule resumed between two epochs then goes on exactly as without the stop;
* a loaded training that has reached ``--max-update``, ``--max-epoch``, ``--stop-min-lr`` or ``--stop-time-hours``
  logs one line (``NOTHING_LEFT``: why, and where its checkpoints are) and ends without an update: fairseq's epoch
  function (``fairseq_cli.train.train``) returns "stop" before its first step, no checkpoint is written, exit status 0.

Such a re-run prints that line and nothing else, and leaves the save folder as it was, modification time included:

* fairseq_cli.train's first line is its whole configuration (``logger.info(cfg)``), logged before it builds anything
  and after the plugin is loaded, in every form of the command; a filter on that logger reads the checkpoint the
  training would resume (memory-mapped: its tensors are not read) and, when the saved state shows the training
  finished, logs the line there and hides the records below WARNING that fairseq logs until its last one (``done
  training``). For ``--stop-min-lr`` it replays the steps the load takes on fairseq's learning-rate schedule (a
  plateau step may come first), with a one-parameter stand-in for the optimizer;
* ``checkpoint_utils.verify_checkpoint_directory`` (a file made and removed to test the folder) gives the folder its
  times back.

``fairseq_cli.train`` is patched where it is imported (under ``fairseq-train`` and ``fairseq-hydra-train`` it is,
before the plugin) and where it runs as ``__main__`` (``python -m fairseq_cli.train``), and again by the first
checkpoint load of a training: the plugin does not import it itself,
since that import configures Python's root logger. Early stopping (``--patience``) is not covered: fairseq does not
save its count of validations without improvement, so a re-run cannot tell that it had stopped.
"""

import ast
import copy
import functools
import logging
import os
import sys
from typing import Any, Optional

import torch
from fairseq import checkpoint_utils
from fairseq.optim import FairseqOptimizer
from fairseq.optim.lr_scheduler import build_lr_scheduler

logger = logging.getLogger(__name__)

#: how the line for a finished training begins (the reproduction harness reads it in train.log)
NOTHING_LEFT = "nothing left to do"
#: the mark on this module's wrappers (``fairseq_residual`` alone is on every patch's, and functools.wraps copies it)
_MARK = "fairseq_residual_finished_training"
#: fairseq_cli.train's logger (also under ``python -m fairseq_cli.train``, where the module is ``__main__``)
_TRAIN_LOGGER = "fairseq_cli.train"


def stop_reason(cfg, trainer, next_epoch: int) -> Optional[str]:
    """Why a training with options ``cfg`` and ``trainer``'s state, about to begin epoch ``next_epoch``, is finished
    (fairseq's own stopping rules, checked before a step instead of after one), or None."""
    return _stop_reason(
        cfg.optimization, trainer.get_num_updates(), next_epoch, trainer.get_lr(), trainer.cumulative_training_time()
    )


def _stop_reason(opt, updates: int, next_epoch: int, lr: Optional[float], seconds: float) -> Optional[str]:
    """``stop_reason`` from the numbers; ``lr`` None where it is not known (``--stop-min-lr`` is not checked)."""
    if opt.max_update and updates >= opt.max_update:
        return f"--max-update {opt.max_update} reached ({updates} updates); to train further, raise --max-update"
    if opt.max_epoch and next_epoch > opt.max_epoch:
        return f"--max-epoch {opt.max_epoch} reached ({updates} updates); to train further, raise --max-epoch"
    if lr is not None and lr <= opt.stop_min_lr:
        return f"the learning rate {lr:g} is at or below --stop-min-lr {opt.stop_min_lr:g} ({updates} updates)"
    hours = seconds / 3600
    if opt.stop_time_hours > 0 and hours > opt.stop_time_hours:
        return f"--stop-time-hours {opt.stop_time_hours:g} reached ({hours:.2f} hours); raise it to train further"
    return None


def saved_stop_reason(cfg) -> Optional[str]:
    """``stop_reason`` for a training with options ``cfg`` from the checkpoint it would resume, before it is loaded;
    None where that cannot tell: no checkpoint_last.pt, a reset or another restore file, several processes (only
    rank 0 reads the file), or an unreadable file. ``--stop-min-lr`` is checked only where the schedule can be
    replayed (``_lr_after_load``)."""
    ck = cfg.checkpoint
    resets = ck.reset_optimizer or ck.reset_lr_scheduler or ck.reset_meters or ck.reset_dataloader
    several = cfg.distributed_training.distributed_world_size > 1 or cfg.common.model_parallel_size > 1
    path = os.path.join(ck.save_dir, f"checkpoint_last{ck.checkpoint_suffix or ''}.pt")
    if resets or several or ck.restore_file != "checkpoint_last.pt" or not os.path.isfile(path):
        return None
    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        updates = state["optimizer_history"][-1]["num_updates"]
    except Exception:  # fairseq's load decides (it falls back to an older checkpoint or names the problem)
        return None
    extra = state.get("extra_state") or {}
    epoch = (extra.get("train_iterator") or {}).get("epoch", 1)  # the loaded iterator's next_epoch_idx
    lr = None
    if cfg.optimization.stop_min_lr >= 0:  # below 0 (fairseq's default), no learning rate reaches it
        try:
            lr = _lr_after_load(cfg, state)
        except Exception:  # a schedule that needs more than a learning rate: the load's own check says the line
            pass
    return _stop_reason(cfg.optimization, updates, epoch, lr, extra.get("previous_training_time", 0.0))


class _LearningRateOnly(FairseqOptimizer):
    """A stand-in for a training's optimizer under its learning-rate schedule, which reads and sets only the rate."""

    def __init__(self):
        super().__init__(None)
        self._optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)


def _lr_after_load(cfg, state) -> float:
    """The learning rate that resuming from the saved ``state`` begins with: fairseq's schedule for ``cfg``, loaded
    and stepped as ``Trainer.load_checkpoint``, ``checkpoint_utils.load_checkpoint`` and ``replay_epoch_end`` do."""
    last, extra = state["optimizer_history"][-1], state["extra_state"]
    optimizer = _LearningRateOnly()
    schedule = build_lr_scheduler(copy.deepcopy(cfg).lr_scheduler, optimizer)  # it writes defaults into its options
    schedule.step_update(0)
    schedule.load_state_dict(last["lr_scheduler_state"])
    group = optimizer.param_groups[0]
    group["lr"] = state["last_optimizer_state"]["param_groups"][0]["lr"]
    group.update(ast.literal_eval(cfg.checkpoint.optimizer_overrides))
    updates = last["num_updates"]
    schedule.step_update(updates)
    itr_state = extra["train_iterator"]
    ended = _ended_epoch(itr_state)
    steps = [(itr_state["epoch"], None), *([] if ended is None else [(ended, extra.get("val_loss"))])]
    for epoch, val_loss in steps:
        schedule.step(epoch, val_loss)
        schedule.step_update(updates)
    return optimizer.get_lr()


class _FinishedRunSilence(logging.Filter):
    """On the handlers that print a finished training's re-run: hides its records below WARNING up to fairseq's
    last line (``done training in ...``), then takes itself off."""

    def __init__(self):
        super().__init__()
        self.handlers = [*logging.getLogger().handlers, *logging.getLogger(_TRAIN_LOGGER).handlers]
        for handler in self.handlers:
            handler.addFilter(self)

    def remove(self) -> None:
        for handler in self.handlers:
            handler.removeFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == _TRAIN_LOGGER and str(record.msg).startswith("done training in"):
            self.remove()
            return False
        return record.levelno >= logging.WARNING


def _silence_installed() -> Optional[_FinishedRunSilence]:
    found = (f for h in logging.getLogger().handlers for f in h.filters if isinstance(f, _FinishedRunSilence))
    return next(found, None)


class _FinishedBeforeStart(logging.Filter):
    """On fairseq_cli.train's logger: at its first record, the configuration, says a finished training's line and
    hides that record and the rest of the run's (``_FinishedRunSilence``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        cfg = record.msg
        if isinstance(cfg, str) or not hasattr(cfg, "checkpoint") or not hasattr(cfg, "optimization"):
            return True
        earlier = _silence_installed()
        if earlier is not None:  # a run of this process that ended before its last line
            earlier.remove()
        reason = saved_stop_reason(cfg)
        if reason is None:
            return True
        logger.info(f"{NOTHING_LEFT}: {reason}; {_result(cfg, cfg.checkpoint.checkpoint_suffix or '')}")
        _FinishedRunSilence()
        return False


def _verify_keeping_times(verify):
    """fairseq's check of the save folder (a file made and removed in it), which then gets its times back."""

    @functools.wraps(verify)
    def verify_checkpoint_directory(save_dir: str) -> None:
        before = os.stat(save_dir) if os.path.isdir(save_dir) else None
        verify(save_dir)
        if before is not None:
            os.utime(save_dir, ns=(before.st_atime_ns, before.st_mtime_ns))

    setattr(verify_checkpoint_directory, _MARK, True)
    verify_checkpoint_directory.fairseq_residual = True  # type: ignore[attr-defined]  # the mark that it is applied
    return verify_checkpoint_directory


def _result(cfg, suffix: str) -> str:
    """Where a finished training's checkpoints are, in words."""
    names = [f"checkpoint_{kind}{suffix}.pt" for kind in ("best", "last")]
    found = [name for name in names if os.path.isfile(os.path.join(cfg.checkpoint.save_dir, name))]
    if not found:
        return f"it was loaded from {cfg.checkpoint.restore_file}"
    return f"its checkpoints are in {cfg.checkpoint.save_dir} ({', '.join(found)})"


def _ended_epoch(itr_state) -> Optional[int]:
    """The epoch E at whose end a checkpoint with this saved iterator was saved (the iterator is at epoch E+1,
    position 0), or None."""
    epoch = itr_state.get("epoch", 1)
    return epoch - 1 if itr_state.get("iterations_in_epoch", 0) == 0 and epoch > 1 else None


def replay_epoch_end(trainer, extra_state, epoch_itr) -> None:
    """After loading a checkpoint saved at the end of epoch E, take the learning-rate step ``lr_step(E, val_loss)``
    that fairseq's loop took after that save; not when the schedule or the iterator was reset (fine-tuning starts
    over)."""
    ended = _ended_epoch((extra_state or {}).get("train_iterator") or {})
    checkpoint_cfg = trainer.cfg.checkpoint
    resets = checkpoint_cfg.reset_lr_scheduler or checkpoint_cfg.reset_optimizer or checkpoint_cfg.reset_dataloader
    if ended is not None and epoch_itr.epoch == ended + 1 and not resets:
        trainer.lr_step(ended, extra_state.get("val_loss"))


def _finishing_load_checkpoint(load_checkpoint):
    @functools.wraps(load_checkpoint)
    def load(cfg, trainer, **passthrough_args):
        extra_state, epoch_itr = load_checkpoint(cfg, trainer, **passthrough_args)
        _wrap_train_loop()  # the training process has imported fairseq_cli.train by now
        if extra_state is not None:
            replay_epoch_end(trainer, extra_state, epoch_itr)
            reason = stop_reason(trainer.cfg, trainer, epoch_itr.next_epoch_idx)
            said = _silence_installed()  # by _FinishedBeforeStart, from the same checkpoint
            if reason is not None and said is None:
                logger.info(f"{NOTHING_LEFT}: {reason}; {_result(trainer.cfg, trainer.checkpoint_suffix)}")
            if reason is None and said is not None:  # never hide the log of a training that goes on
                said.remove()
        return extra_state, epoch_itr

    setattr(load, _MARK, True)
    return load


def _stopping_train(train):
    """fairseq_cli.train's epoch function, returning "stop" (no validation loss) before a step of a finished
    training; the load logged why."""

    @functools.wraps(train)
    def train_epoch(cfg, trainer, task, epoch_itr):
        if stop_reason(cfg, trainer, epoch_itr.next_epoch_idx) is not None:
            return [None], True
        return train(cfg, trainer, task, epoch_itr)

    setattr(train_epoch, _MARK, True)
    return train_epoch


def _train_modules() -> list:
    """fairseq_cli.train where it was imported, and the ``__main__`` module that ``python -m fairseq_cli.train`` runs
    it as (another module object, whose ``main`` calls its own ``train``)."""
    found = [sys.modules.get("fairseq_cli.train")]
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) == "fairseq_cli.train":
        found.append(main)
    return [module for module in found if module is not None and hasattr(module, "train")]


def _wrap_train_loop() -> None:
    module: Any
    for module in _train_modules():
        if not getattr(module.train, _MARK, False):
            module.train = _stopping_train(module.train)


def apply() -> None:
    if not getattr(checkpoint_utils.load_checkpoint, _MARK, False):
        checkpoint_utils.load_checkpoint = _finishing_load_checkpoint(checkpoint_utils.load_checkpoint)
    if not getattr(checkpoint_utils.verify_checkpoint_directory, _MARK, False):
        checkpoint_utils.verify_checkpoint_directory = _verify_keeping_times(
            checkpoint_utils.verify_checkpoint_directory
        )
    train_logger = logging.getLogger(_TRAIN_LOGGER)
    if not any(isinstance(f, _FinishedBeforeStart) for f in train_logger.filters):
        train_logger.addFilter(_FinishedBeforeStart())
    _wrap_train_loop()


def undo_train_loop() -> None:
    """Give ``fairseq_cli.train`` its own epoch function and logger back (``patches.undo_all``; neither is a fixed
    target)."""
    module: Any
    for module in _train_modules():
        if getattr(module.train, _MARK, False):
            module.train = module.train.__wrapped__
    train_logger = logging.getLogger(_TRAIN_LOGGER)
    for found in [f for f in train_logger.filters if isinstance(f, _FinishedBeforeStart)]:
        train_logger.removeFilter(found)
