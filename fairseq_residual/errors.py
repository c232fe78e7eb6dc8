"""The exception types of the errors a user can fix: each message names the problem and the fix.

This module imports nothing of the plugin: nearly every module raises these, so anything imported here would close
an import circle through them. How they are reported (one line ``error: <message>`` instead of a traceback) is
``error_reporting``'s job.
"""


class UserError(Exception):
    """A problem in the user's input, with the fix in the message."""


class ConfigError(UserError, ValueError):
    """An invalid model option or combination of options."""


class CheckpointMismatchError(UserError, RuntimeError):
    """A checkpoint written for another architecture or residual scheme."""


class ArchitectureMismatchError(CheckpointMismatchError):
    """A checkpoint of another architecture than residual_transformer, or the reverse."""


class DimensionMismatchError(CheckpointMismatchError):
    """A checkpoint of the same architecture with other dimensions (layers, widths, heads)."""


class DictionaryChangedError(CheckpointMismatchError):
    """A data folder whose dictionary is not the one the checkpoint was trained with."""


class CheckpointFileError(UserError, RuntimeError):
    """A checkpoint file that is missing, empty or truncated."""


class DataError(UserError, FileNotFoundError):
    """Missing or malformed input data."""


class OptionError(UserError):
    """A command-line option's value that the plugin does not take, found while fairseq parses its command line.
    Not a ValueError, which argparse would catch and report after the usage of every fairseq option."""


class UnsafeCheckpointError(UserError, RuntimeError):
    """A checkpoint file whose pickle calls code (a global outside torch's safe-loading allowlist)."""
