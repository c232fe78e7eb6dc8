"""Silence the known third-party lines that would bury what a command says about the user's run.

Each entry below names the library, the category and the message of one line that fairseq, hydra, torch
or fairscale print on every run here, none of which the user can act on; nothing else is filtered (never a
whole category or module). ``FAIRSEQ_RESIDUAL_VERBOSE=1`` leaves everything as it is.

The plugin applies this first thing on import; the project's console commands apply it before they import
fairseq. fairseq's own CLIs (``fairseq-train --user-dir ...``, ``fairseq-hydra-train ... common.user_dir=...``)
print some lines before they load the plugin: those entries are marked ``at_startup``, and ``startup_line``
makes them the line of ``fairseq_residual_quiet.pth``, which installing the package puts into site-packages
(setup.py) so that Python installs them when it starts. tensorboardX, a requirement, keeps fairseq from logging
its absence.

This module imports nothing outside the standard library: the console commands and setup.py load it without
the plugin's ``__init__`` (which imports fairseq).
"""

import contextlib
import logging
import os
import warnings
from typing import NamedTuple, Type

VERBOSE_VARIABLE = "FAIRSEQ_RESIDUAL_VERBOSE"


class Known(NamedTuple):
    """One silenced warning, as ``warnings.filterwarnings`` takes it."""

    category: Type[Warning]
    message: str  # a regex the message starts with
    module: str  # the module Python attributes it to; "" where that is the caller's frame, which varies
    at_startup: bool = False  # fairseq's own CLIs print it before they load the plugin: installed by the .pth too


KNOWN_WARNINGS = [
    # fairscale's import (via fairseq's FSDP wrapper): its own use of a deprecated torch decorator
    Known(FutureWarning, r"`torch\.cuda\.amp\.custom_(fwd|bwd)\(args\.\.\.\)` is deprecated", r"fairscale\.", True),
    # fairseq's train step wraps every forward in torch.cuda.amp.autocast(enabled=False) on CPU too
    Known(FutureWarning, r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated", r"fairseq\."),
    # fairseq composes its config through hydra's deprecated experimental API
    Known(UserWarning, r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental", r"hydra\."),
    # fairseq-hydra-train's @hydra.main (fairseq_cli/hydra_train.py) gives no version_base
    Known(UserWarning, r"\s*The version_base parameter is not specified", "", True),
    # fairseq's own config.yaml (our configs use the current syntax)
    Known(UserWarning, r"In '[\w/]+': Usage of deprecated keyword in package header '# @package _group_'", r"hydra\."),
    # fairseq registers its config schema under the name of the config that hydra composes
    Known(UserWarning, r"\s*'[\w.-]+' is validated against ConfigStore schema with the same name", "", True),
    Known(UserWarning, r"\s*The strict flag in the compose API is deprecated", r"hydra\."),
    # fairseq's data loaders ask for pinned memory, which a machine without a GPU cannot give
    Known(UserWarning, r"'pin_memory' argument is set as true but no accelerator is found", r"torch\.utils\.data\."),
    # fairseq's decoder passes a float future mask with a bool padding mask (fairseq's
    # TransformerDecoder.buffered_future_mask and MultiheadAttention; torch converts both the same way)
    Known(
        UserWarning, r"Support for mismatched key_padding_mask and attn_mask is deprecated", r"torch\.nn\.functional"
    ),
    # fairseq's TokenBlockDataset: ``e - 2`` on a one-token block's unsigned end offset (a blank line under
    # --sample-break-mode eos) wraps in the past target, which a language model never reads (test_language_model.py)
    Known(RuntimeWarning, r"overflow encountered in scalar subtract", r"fairseq\.data\.token_block_dataset"),
]

#: logger name -> the starts of its silenced messages
KNOWN_LOG_RECORDS = {
    # logged on every import of fairseq.tasks: an optional dependency of fairseq's speech tasks
    "fairseq.tasks.text_to_speech": ("Please install tensorboardX",),
    # fairseq's wav2vec2_classification sets the root logger to DEBUG on import, which shows these
    "hydra.core.utils": ("Setting JobRuntime:name=",),
    # the bookkeeping of fairseq's batch-iterator cache, on every batch iterator made: in fairseq-generate, once
    # per sentence in fairseq-interactive, on every translate() of the hub interface
    "fairseq.tasks.fairseq_task": (
        "can_reuse_epoch_itr = ",
        "reuse_dataloader = ",
        "rebuild_batches = ",
        "creating new batches for epoch ",
    ),
}

#: the loggers of KNOWN_LOG_RECORDS that fairseq-hydra-train's hydra writes to before the plugin loads
STARTUP_LOG_RECORDS = ["hydra.core.utils"]

#: loggers whose dump of the whole configuration (a 10 KB dict or Namespace, not a message) is silenced
CONFIG_DUMP_LOGGERS = [
    "fairseq_cli.generate",
    "fairseq_cli.interactive",
    "fairseq_cli.preprocess",
    "fairseq_cli.eval_lm",
    "fairseq.models.fairseq_model",  # from_pretrained (hub.load_translator)
]

#: logger name -> the starts of its messages silenced while the hub loads a model (``hub_loading``): fairseq-train
#: and fairseq-generate log the same dictionary lines, which belong in their logs
HUB_LOAD_RECORDS = {
    "fairseq.file_utils": ("loading archive file ",),  # the checkpoint's folder and the data-bin
    "fairseq.tasks.translation": ("[",),  # "[de] dictionary: 8000 types", once per language
    "fairseq.tasks.language_modeling": ("dictionary: ",),
}


class _KnownRecords(logging.Filter):
    def __init__(self, message_starts=None):
        super().__init__()
        self.message_starts = message_starts

    def filter(self, record: logging.LogRecord) -> bool:
        if self.message_starts is None:  # a configuration dump: the message is the config object itself
            return isinstance(record.msg, str)
        return not str(record.msg).startswith(self.message_starts)


_applied = False


def _verbose() -> bool:
    return os.environ.get(VERBOSE_VARIABLE, "") not in ("", "0")


@contextlib.contextmanager
def hub_loading():
    """The ``HUB_LOAD_RECORDS`` silenced for the duration (one hub load), unless ``FAIRSEQ_RESIDUAL_VERBOSE`` is set."""
    added = [] if _verbose() else [(logging.getLogger(n), _KnownRecords(s)) for n, s in HUB_LOAD_RECORDS.items()]
    for named, known in added:
        named.addFilter(known)
    try:
        yield
    finally:
        for named, known in added:
            named.removeFilter(known)


def apply():
    """Install the filters above, once per process, unless ``FAIRSEQ_RESIDUAL_VERBOSE`` is set."""
    global _applied
    if _applied or _verbose():
        return
    _applied = True
    ignore_known_warnings()
    for name, message_starts in KNOWN_LOG_RECORDS.items():
        logging.getLogger(name).addFilter(_KnownRecords(message_starts))
    for name in CONFIG_DUMP_LOGGERS:
        logging.getLogger(name).addFilter(_KnownRecords())


def ignore_known_warnings() -> None:
    """The warnings filters of ``KNOWN_WARNINGS`` (``apply`` installs them once per process)."""
    for known in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=known.message, category=known.category, module=known.module)


def startup_line() -> str:
    """The line of ``fairseq_residual_quiet.pth``, which site.py executes at every start of the environment's Python:
    the ``at_startup`` warnings filtered, and the ``STARTUP_LOG_RECORDS`` when the program is fairseq-hydra-train
    (only there, so that no other program pays for importing ``logging``), unless ``FAIRSEQ_RESIDUAL_VERBOSE`` is set;
    then ``deferred_imports.install()`` (fairseq started without scikit-learn and SciPy), whatever the verbosity.

    Plain statements only: site.py runs the line with ``exec`` inside a function, where a comprehension or a
    lambda would not see the names the line defines."""
    statements = [
        "import os, sys, warnings",
        f"quiet = os.environ.get({VERBOSE_VARIABLE!r}, '') in ('', '0')",
        # the console script, or python -m fairseq_cli.hydra_train (sys.argv is only '-m' until the module is found)
        "hydra_train = os.path.basename(sys.argv[0]) == 'fairseq-hydra-train' "
        "or sys.argv[0] == '-m' and 'fairseq_cli.hydra_train' in sys.orig_argv",
    ]
    for known in KNOWN_WARNINGS:
        if known.at_startup:
            statements.append(
                f"quiet and warnings.filterwarnings('ignore', message={known.message!r}, "
                f"category={known.category.__name__}, module={known.module!r})"
            )
    for name in STARTUP_LOG_RECORDS:
        statements.append(
            f"quiet and hydra_train and __import__('logging').getLogger({name!r})"
            f".addFilter(lambda record: not str(record.msg).startswith({KNOWN_LOG_RECORDS[name]!r}))"
        )
    # last, so that a failure here leaves the filters above installed: deferred_imports.install(), from its file
    statements += [
        "import importlib.util",
        "residual = importlib.util.find_spec('fairseq_residual')",
        "deferred = residual and residual.submodule_search_locations and importlib.util.spec_from_file_location("
        "'fairseq_residual_deferred_imports', "
        "os.path.join(list(residual.submodule_search_locations)[0], 'deferred_imports.py'))",
        "module = deferred and importlib.util.module_from_spec(deferred)",
        "module and deferred.loader.exec_module(module)",
        "module and module.install()",
    ]
    return "; ".join(statements) + "\n"
