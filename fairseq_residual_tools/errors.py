"""Errors a user of the tools can fix; the command-line entry points report them as one line.

These are the tools' own classes: importing the plugin's ``fairseq_residual.errors`` would load
fairseq and torch, which data preparation does not need.
"""


class UserError(Exception):
    """A problem in the user's input, with the fix in the message."""


class ConfigError(UserError, ValueError):
    """An invalid option or combination of options."""


class DataError(UserError, FileNotFoundError):
    """Missing or malformed input data."""


def exit_on_user_error(main, *args) -> int:
    """Run a command's ``main``; a ``UserError`` becomes ``error: <message>`` and exit status 1."""
    import sys

    try:
        return main(*args) or 0
    except UserError as e:
        sys.stderr.write(f"error: {e}\n")
        return 1
