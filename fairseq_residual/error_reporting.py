"""Errors a user can fix, reported as one line instead of a stack trace.

fairseq's CLIs let exceptions escape as tracebacks. Importing the plugin
installs an ``excepthook`` that prints ``error: <message>`` (exit status 1) for
the ``UserError`` subclasses of ``errors``, raised by the plugin's own checks (options,
data folder, checkpoints), also when fairseq's code re-raised them inside
another exception (it wraps checkpoint loading errors, for example). Every other
exception, above all any raised by the user's own code, goes to Python's
default hook unchanged. Set ``FAIRSEQ_RESIDUAL_TRACEBACK=1`` to see full
tracebacks anyway.

Three more become one line: fairseq's own errors for a command-line mistake it
words without the fix (``FAIRSEQ_MISTAKES``, matched by type and message, raised
in fairseq's code), omegaconf's refusal of an unknown ``model.residual_scheme``
(hydra), and Ctrl-C during ``fairseq-train``, which says at which update training
stopped and which checkpoint the same command resumes from.

``fairseq-hydra-train`` runs inside Hydra, which catches every exception and
prints its own shortened traceback unless ``HYDRA_FULL_ERROR`` is set. In that
program (and only there), importing the plugin sets ``HYDRA_FULL_ERROR=1`` if it
is unset, so that exceptions reach the hook: user errors print one line, others
their full traceback.
"""

import logging
import os
import signal
import sys
from typing import Optional

from omegaconf.errors import ValidationError

from .checkpoint_reading import _load_lazily, _Unreadable, recorded_updates
from .config import ResidualTransformerConfig
from .errors import UserError
from .schemes import UnknownSchemeError, get_scheme

#: (type, start of the message) of an error fairseq's code raises for a command-line mistake -> the report
FAIRSEQ_MISTAKES = [
    (
        AssertionError,
        "Must specify batch size either with --max-tokens or --batch-size",
        "no batch size: give --max-tokens N (tokens per batch, e.g. 4096) or --batch-size N (sentences per batch)",
    ),
]


def one_line_message(exc: BaseException):
    """The one-line report for ``exc``, or None if it deserves a traceback."""
    seen = set()
    cause: Optional[BaseException] = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, UserError):
            return str(cause)
        unknown_scheme = _unknown_scheme_in_config(cause)
        if unknown_scheme is not None:
            return unknown_scheme
        if not _raised_in_fairseq(cause):
            return None
        for kind, message_start, report in FAIRSEQ_MISTAKES:
            if isinstance(cause, kind) and str(cause).startswith(message_start):
                return report
        cause = cause.__cause__ or cause.__context__
    return None


def _unknown_scheme_in_config(exc: BaseException) -> Optional[str]:
    """hydra's ``model.residual_scheme=NAME`` of an unknown NAME, refused by omegaconf's check of the model's config
    (its enum, while fairseq merges the config: a 90-line traceback), worded as ``--residual-scheme`` words it."""
    if not isinstance(exc, ValidationError) or getattr(exc, "object_type", None) is not ResidualTransformerConfig:
        return None
    if getattr(exc, "key", None) != "residual_scheme":
        return None
    try:
        get_scheme(getattr(exc, "value", None))
    except UnknownSchemeError as unknown:
        return str(unknown)
    return None


def where_training_stopped(tb) -> Optional[str]:
    """For a Ctrl-C inside ``fairseq-train`` (``tb``: its traceback), the update it stopped at and the
    checkpoint that the same command resumes from; None outside a training."""
    while tb is not None:
        names = tb.tb_frame.f_locals
        trainer, epoch_itr, cfg = names.get("trainer"), names.get("epoch_itr"), names.get("cfg")
        if hasattr(trainer, "get_num_updates") and hasattr(epoch_itr, "epoch") and cfg is not None:
            last = os.path.join(cfg.checkpoint.save_dir, f"checkpoint_last{cfg.checkpoint.checkpoint_suffix}.pt")
            where = f"stopped by Ctrl-C at update {trainer.get_num_updates()} (epoch {epoch_itr.epoch})"
            try:
                return f"{where}; {last} holds update {recorded_updates(_load_lazily(last))}: {_RESUMES}"
            except _Unreadable:
                return f"{where}; no checkpoint saved yet in {cfg.checkpoint.save_dir}: the same command starts over"
        tb = tb.tb_next
    return None


_RESUMES = "the same command resumes from there"


def _raised_in_fairseq(exc: BaseException) -> bool:
    """Whether fairseq's own code raised ``exc`` (the innermost frame of its traceback is in fairseq)."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return any(tb.tb_frame.f_code.co_filename.startswith(folder) for folder in _fairseq_folders())


def _fairseq_folders():
    import importlib.util

    folders = []
    for package in ("fairseq", "fairseq_cli"):
        spec = importlib.util.find_spec(package)
        folders += [os.path.join(f, "") for f in (spec.submodule_search_locations or [])] if spec else []
    return folders


def _one_line_excepthook(previous):
    def hook(exc_type, exc, tb):
        if os.environ.get("FAIRSEQ_RESIDUAL_TRACEBACK"):
            return previous(exc_type, exc, tb)
        if issubclass(exc_type, KeyboardInterrupt):
            stopped = where_training_stopped(tb)
            if stopped is None:
                return previous(exc_type, exc, tb)
            sys.stderr.write(f"{stopped}\n")
            return _end_as_interrupted()
        message = one_line_message(exc)
        if message is None:
            previous(exc_type, exc, tb)
        else:
            sys.stderr.write(f"error: {message}\n")

    hook.fairseq_residual = True  # type: ignore[attr-defined]  # the mark that it is applied
    return hook


def _end_as_interrupted():
    """End the process as Python ends it after an uncaught Ctrl-C (killed by SIGINT: status 130 in a
    shell), but without the interpreter's teardown: after an interrupted fairseq training, that teardown
    sometimes aborted in native code ("terminate called without an active exception", SIGABRT, in about
    one CI run in four). Nothing is left to finalise: checkpoints are whole files, the logs are flushed here."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def install_excepthook():
    if not getattr(sys.excepthook, "fairseq_residual", False):
        sys.excepthook = _one_line_excepthook(sys.excepthook)
    if _running_fairseq_hydra_train():
        os.environ.setdefault("HYDRA_FULL_ERROR", "1")


def _running_fairseq_hydra_train() -> bool:
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(main_spec, "name", None) == "fairseq_cli.hydra_train" or "fairseq_cli.hydra_train" in sys.modules
