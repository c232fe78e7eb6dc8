"""Errors a user of the tools can fix; the command-line entry points report them as one line.

The tools' own classes: importing the plugin's ``fairseq_residual.errors`` would load fairseq and torch.
"""

import sys


class UserError(Exception):
    """A problem in the user's input, with the fix in the message."""


class ConfigError(UserError, ValueError):
    """An invalid option or combination of options."""


class DataError(UserError, FileNotFoundError):
    """Missing or malformed input data."""


def exit_on_user_error(main, *args) -> int:
    """Run ``main``; a ``UserError`` becomes ``error: <message>`` and exit status 1. The exit status is
    ``main``'s result when that is an int, else 0 (some mains return their results, for the tests)."""
    try:
        status = main(*args)
    except UserError as e:
        sys.stderr.write(f"error: {e}\n")
        return 1
    return status if isinstance(status, int) else 0
