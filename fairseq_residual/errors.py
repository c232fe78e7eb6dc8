"""Errors a user can fix, reported as one line instead of a stack trace.

fairseq's CLIs let exceptions escape as tracebacks. Importing the plugin
installs an ``excepthook`` that prints ``error: <message>`` (exit status 1) for

* the ``UserError`` subclasses below, also when fairseq re-raised them inside
  another exception (it wraps checkpoint loading errors, for example);
* ``FileNotFoundError``, which in the CLIs means a wrong path given by the user
  (a missing data folder, dictionary or checkpoint);

and leaves every other exception to Python's default hook. Set
``FAIRSEQ_RESIDUAL_TRACEBACK=1`` to see full tracebacks anyway.
"""

import os
import sys
from typing import Optional


class UserError(Exception):
    """A problem in the user's input, with the fix in the message."""


class ConfigError(UserError, ValueError):
    """An invalid model option or combination of options."""


class CheckpointMismatchError(UserError, RuntimeError):
    """A checkpoint written for another architecture or residual scheme."""


class DataError(UserError, FileNotFoundError):
    """Missing or malformed input data."""


def one_line_message(exc: BaseException):
    """The one-line report for ``exc``, or None if it deserves a traceback."""
    seen = set()
    cause: Optional[BaseException] = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, UserError):
            return str(cause)
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, FileNotFoundError):
        path = exc.filename or str(exc)
        return (
            f"no such file or directory: {path} -- check the path; a data folder is "
            "made by data-prep/ or fairseq-preprocess, a checkpoint by fairseq-train"
        )
    return None


def _one_line_excepthook(previous):
    def hook(exc_type, exc, tb):
        message = None if os.environ.get("FAIRSEQ_RESIDUAL_TRACEBACK") else one_line_message(exc)
        if message is None:
            previous(exc_type, exc, tb)
        else:
            sys.stderr.write(f"error: {message}\n")

    hook.fairseq_residual = True
    return hook


def install_excepthook():
    if not getattr(sys.excepthook, "fairseq_residual", False):
        sys.excepthook = _one_line_excepthook(sys.excepthook)
