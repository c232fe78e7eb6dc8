"""Errors a user can fix, reported as one line instead of a stack trace.

fairseq's CLIs let exceptions escape as tracebacks. Importing the plugin
installs an ``excepthook`` that prints ``error: <message>`` (exit status 1) for
the exceptions below and leaves every other exception to Python's default hook.
Set ``FAIRSEQ_RESIDUAL_TRACEBACK=1`` to see the full trace anyway.
"""
import os
import sys


class UserError(Exception):
    """A problem in the user's input, with the fix in the message."""


class ConfigError(UserError, ValueError):
    """An invalid model option or combination of options."""


class CheckpointMismatchError(UserError, RuntimeError):
    """A checkpoint written for another architecture or residual scheme."""


class DataError(UserError, FileNotFoundError):
    """Missing or malformed input data."""


def _one_line_excepthook(previous):
    def hook(exc_type, exc, tb):
        if issubclass(exc_type, UserError) and not os.environ.get("FAIRSEQ_RESIDUAL_TRACEBACK"):
            sys.stderr.write(f"error: {exc}\n")
            return
        previous(exc_type, exc, tb)

    hook.fairseq_residual = True
    return hook


def install_excepthook():
    if not getattr(sys.excepthook, "fairseq_residual", False):
        sys.excepthook = _one_line_excepthook(sys.excepthook)
