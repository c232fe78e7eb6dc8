"""Every change the plugin makes to fairseq (and torch, and Python's error hook) on import, in one table.

``PATCHES`` lists them: what each one changes, why, the fairseq issue where there is one, and the attributes it
replaces. ``apply_all`` (run by ``fairseq_residual/__init__.py``) applies them in order; each ``apply`` is
idempotent. ``undo_all`` puts back what was there before (for tests, and for code that wants stock fairseq
again in the same process). docs/patches.md renders the same table for readers. A new patch is one row here:
the module holding its code, the function that applies it, and the attributes it replaces.
"""

import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from fairseq import checkpoint_utils, tasks
from fairseq.data import data_utils
from fairseq.distributed import utils as distributed_utils
from fairseq.tasks import FairseqTask, translation
from fairseq.trainer import Trainer

from . import (
    batching_fix,
    bf16_without_tpu,
    checkpoint_loading,
    checkpoint_reading,
    checkpoint_saving,
    data_folder,
    error_reporting,
    finished_training,
    interactive_input,
    numpy_compat,
)

#: (object, attribute name): a module's function or a class's method that a patch replaces
Target = Tuple[Any, str]


@dataclass(frozen=True)
class Patch:
    name: str
    what: str
    why: str
    issue: Optional[str]  # fairseq's issue, if one was found
    apply: Callable[[], None]
    targets: Tuple[Target, ...] = ()  # what ``apply`` replaces, restored by ``undo``
    undo_extra: Optional[Callable[[], None]] = None  # for a change that is not an attribute (the safe-load list)


def _disallow_fairseq_checkpoints() -> None:
    """Take the globals of ``checkpoint_loading`` off torch's safe-load allowlist, leaving the others there."""
    ours = set(map(id, checkpoint_loading.FAIRSEQ_CHECKPOINT_GLOBALS))
    kept = [g for g in torch.serialization.get_safe_globals() if id(g) not in ours]
    torch.serialization.clear_safe_globals()
    torch.serialization.add_safe_globals(kept)


PATCHES: List[Patch] = [
    Patch(
        "safe-load allowlist",
        "adds argparse.Namespace and numpy arrays/dtypes to torch's safe-load allowlist (add_safe_globals)",
        "torch >= 2.6 loads with weights_only=True, fairseq's loader does not pass it, and fairseq checkpoints hold "
        "these few non-tensor objects: fairseq-generate and resuming fail without them",
        "#5610, #5603",
        checkpoint_loading.allow_fairseq_checkpoints,
        undo_extra=_disallow_fairseq_checkpoints,
    ),
    Patch(
        "keep the last batch",
        "data_utils.batch_by_size returns the batch it drops when the size is not a multiple of "
        "--required-batch-size-multiple",
        "fairseq-generate silently translated fewer sentences than the test set has",
        "#5036, #5351",
        batching_fix.apply,
        ((data_utils, "batch_by_size"),),
    ),
    Patch(
        "complete checkpoint files",
        "every checkpoint file is written or copied into <file>.tmp, fsync'ed and renamed; .tmp files of a killed "
        "save are removed when training starts again",
        "fairseq copies checkpoint_last.pt / checkpoint_best.pt in place: a kill during the copy left a truncated "
        "file that every later start died loading (measured, results/kill-stress)",
        None,
        checkpoint_saving.apply,
        (
            (checkpoint_utils, "torch_persistent_save"),
            (checkpoint_utils, "PathManager"),
            (checkpoint_utils, "load_checkpoint"),
        ),
    ),
    Patch(
        "resume from a readable checkpoint",
        "Trainer.load_checkpoint falls back to the newest readable checkpoint; loading a checkpoint of the other "
        "task (a language model's for a translation, or the reverse), another scheme, architecture, dimensions or "
        "dictionary, an unreadable --path, or one that torch's safe loading refuses (it carries code) stops with "
        "one line naming the file and the difference; a resumed run's "
        "reusable batches are made with epoch 1's seed, as the uninterrupted run's",
        "an unreadable checkpoint_last.pt stopped every later start; a wrong checkpoint failed with a long "
        "state-dict or unpickling traceback; a run resumed after an epoch's end batched other sentences together",
        None,
        checkpoint_reading.apply,
        (
            (FairseqTask, "get_batch_iterator"),
            (Trainer, "load_checkpoint"),
            (checkpoint_utils, "load_checkpoint_to_cpu"),
            (checkpoint_utils, "load_model_ensemble_and_task"),
        ),
    ),
    Patch(
        "a finished training stays finished",
        "checkpoint_utils.load_checkpoint logs one line when the loaded training has reached --max-update, "
        "--max-epoch, --stop-min-lr or --stop-time-hours, and fairseq_cli.train.train then stops before a step (a "
        "filter on fairseq_cli.train's logger says it at the configuration dump, from the saved state and for "
        "--stop-min-lr the learning-rate schedule replayed on it, and hides fairseq's other lines); "
        "verify_checkpoint_directory gives the folder its times back; resuming at an epoch's end first takes the "
        "learning-rate step fairseq took after that save",
        "fairseq checks --max-update after an update: every re-run of a finished training trained one more and "
        "printed 90 lines around it; a plateau schedule lost the step after the last save, and a training stopped by "
        "--stop-min-lr trained on",
        None,
        finished_training.apply,
        ((checkpoint_utils, "load_checkpoint"), (checkpoint_utils, "verify_checkpoint_directory")),
        undo_extra=finished_training.undo_train_loop,
    ),
    Patch(
        "check the data folder",
        "tasks.setup_task and translation.load_langpair_dataset check the data folder, its task (a language "
        "model's data-bin given to a translation, or the reverse), language pair, split and joined dictionary first",
        "fairseq's own errors for these name neither the folder nor the fix",
        None,
        data_folder.apply,
        ((tasks, "setup_task"), (translation, "load_langpair_dataset")),
    ),
    Patch(
        "numpy.compat for numpy 2",
        "fairseq's token_block_dataset and language_pair_dataset see numpy plus numpy 1's compat.long (int), "
        "which numpy 2 removed",
        "every language_modeling dataset (TokenBlockDataset) raised AttributeError under numpy 2: "
        "fairseq-train --task language_modeling and fairseq-eval-lm could not start",
        None,
        numpy_compat.apply,
        tuple((module, "np") for module in numpy_compat.MODULES),
    ),
    Patch(
        "--bf16 without a TPU",
        "distributed_utils.call_main turns common.tpu off again when --bf16 set it and torch_xla is not installed, "
        "with one line; fairseq's bfloat16 training (fp32 master weights) then runs on the GPU or the CPU",
        "fairseq takes --bf16 to imply --tpu: on any machine without torch_xla, fairseq-train --bf16 stopped in "
        "AttributeError 'xla_device'",
        None,
        bf16_without_tpu.apply,
        ((distributed_utils, "call_main"),),
    ),
    Patch(
        "say that the input is not UTF-8",
        "fairseq_cli.interactive.buffered_read (where that module is imported) reads stdin and an --input file with "
        "surrogateescape under every locale and says in one line on stderr which line (of which file) first holds a "
        "byte UTF-8 cannot decode",
        "fairseq-interactive turned Latin-1 input into <unk> without a word under the C locale, and stopped in a "
        "UnicodeDecodeError traceback under a UTF-8 locale and on an --input file",
        None,
        interactive_input.apply,
        undo_extra=interactive_input.undo,
    ),
    Patch(
        "one-line errors",
        "sys.excepthook prints the plugin's own errors as one line 'error: ...'; under fairseq-hydra-train it sets "
        "HYDRA_FULL_ERROR=1 (if unset) so that the error reaches the hook",
        "a user error should name the problem and the fix, not end a 60-line traceback",
        None,
        error_reporting.install_excepthook,
        ((sys, "excepthook"),),
    ),
]

_ORIGINALS: Dict[Tuple[int, str], Any] = {}


def apply_all() -> None:
    for patch in PATCHES:
        for owner, attribute in patch.targets:
            _ORIGINALS.setdefault((id(owner), attribute), getattr(owner, attribute))
        patch.apply()


def undo_all() -> None:
    """Restore what ``apply_all`` replaced, last patch first (HYDRA_FULL_ERROR, once set, stays)."""
    for patch in reversed(PATCHES):
        for owner, attribute in patch.targets:
            original = _ORIGINALS.pop((id(owner), attribute), None)
            if original is not None:
                setattr(owner, attribute, original)
        if patch.undo_extra is not None:
            patch.undo_extra()
