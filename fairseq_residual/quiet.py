"""Silence the known third-party lines that would bury what a command says about the user's run.

Each entry below names the library, the category and the message of one line that fairseq, hydra, torch
or fairscale print on every run here, none of which the user can act on; nothing else is filtered (never a
whole category or module). ``FAIRSEQ_RESIDUAL_VERBOSE=1`` leaves everything as it is.

The plugin applies this first thing on import; the project's console commands apply it before they import
fairseq. fairseq's own CLIs (``fairseq-train --user-dir ...``) import fairseq before the plugin: of what
fairseq's import prints, fairscale's warnings are silenced by the .pth file that setup.py installs (Python
reads it at startup), and tensorboardX, a requirement, keeps fairseq from logging its absence.

This module imports nothing outside the standard library: the console commands load it without the
plugin's ``__init__`` (which imports fairseq).
"""

import logging
import os
import warnings

VERBOSE_VARIABLE = "FAIRSEQ_RESIDUAL_VERBOSE"

#: (category, message regex, module regex) of each silenced warning; the module is the one Python
#: attributes the warning to ("" where that is the caller's frame, which varies with the entry point)
KNOWN_WARNINGS = [
    # fairscale's import (via fairseq's FSDP wrapper): its own use of a deprecated torch decorator (also
    # installed at startup by setup.py's fairseq_residual_quiet.pth, for fairseq's own CLIs)
    (FutureWarning, r"`torch\.cuda\.amp\.custom_(fwd|bwd)\(args\.\.\.\)` is deprecated", r"fairscale\."),
    # fairseq's train step wraps every forward in torch.cuda.amp.autocast(enabled=False) on CPU too
    (FutureWarning, r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated", r"fairseq\."),
    # fairseq composes its config through hydra's deprecated experimental API
    (UserWarning, r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental", r"hydra\."),
    (UserWarning, r"\s*The version_base parameter is not specified", r"hydra\."),
    (UserWarning, r"In '[\w/]+': Usage of deprecated keyword in package header '# @package _group_'", r"hydra\."),
    (UserWarning, r"\s*'config' is validated against ConfigStore schema with the same name", ""),
    (UserWarning, r"\s*The strict flag in the compose API is deprecated", r"hydra\."),
    # fairseq's data loaders ask for pinned memory, which a machine without a GPU cannot give
    (UserWarning, r"'pin_memory' argument is set as true but no accelerator is found", r"torch\.utils\.data\."),
    # fairseq's decoder passes a float future mask with a bool padding mask (fairseq's
    # TransformerDecoder.buffered_future_mask and MultiheadAttention; torch converts both the same way)
    (UserWarning, r"Support for mismatched key_padding_mask and attn_mask is deprecated", r"torch\.nn\.functional"),
]

#: logger name -> what its silenced records are
KNOWN_LOG_RECORDS = {
    # logged on every import of fairseq.tasks: an optional dependency of fairseq's speech tasks
    "fairseq.tasks.text_to_speech": "Please install tensorboardX",
    # fairseq's wav2vec2_classification sets the root logger to DEBUG on import, which shows these
    "hydra.core.utils": "Setting JobRuntime:name=",
}

#: loggers whose dump of the whole configuration (a 10 KB dict or Namespace, not a message) is silenced
CONFIG_DUMP_LOGGERS = [
    "fairseq_cli.generate",
    "fairseq_cli.interactive",
    "fairseq_cli.preprocess",
    "fairseq.models.fairseq_model",  # from_pretrained (hub.load_translator)
]


class _KnownRecords(logging.Filter):
    def __init__(self, message_start=None):
        super().__init__()
        self.message_start = message_start

    def filter(self, record: logging.LogRecord) -> bool:
        if self.message_start is None:  # a configuration dump: the message is the config object itself
            return isinstance(record.msg, str)
        return not str(record.msg).startswith(self.message_start)


_applied = False


def apply():
    """Install the filters above, once per process, unless ``FAIRSEQ_RESIDUAL_VERBOSE`` is set."""
    global _applied
    if _applied or os.environ.get(VERBOSE_VARIABLE, "") not in ("", "0"):
        return
    _applied = True
    for category, message, module in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    for name, message_start in KNOWN_LOG_RECORDS.items():
        logging.getLogger(name).addFilter(_KnownRecords(message_start))
    for name in CONFIG_DUMP_LOGGERS:
        logging.getLogger(name).addFilter(_KnownRecords())
