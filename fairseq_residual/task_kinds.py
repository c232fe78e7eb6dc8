"""Which of the two tasks a data-bin or a checkpoint belongs to, and the one line when it is given to the other.

A language model's files and a translation's look alike (``OUT/bin``, ``checkpoint_best.pt``), and fairseq finds a
mix-up late and deep: ``FileNotFoundError: dict.txt``, "Could not infer language pair", a state dict of other keys
or a missing attribute, or a misleading "dictionary changed". What each one is can be read from its files:

* a data-bin of ``--task language_modeling`` holds ``dict.txt`` (``fairseq-preprocess --only-source``, as
  ``prepare-monolingual.sh`` runs it); one of ``--task translation`` holds ``dict.<lang>.txt`` per language and
  ``<split>.<src>-<tgt>.<lang>.bin``;
* a checkpoint records the task it was trained with (``cfg.task._name``, or ``args.task`` in older ones).

Tasks other than these two (and the ``translation_*`` family, which reads translation data) are left alone.
"""

import os
from typing import Optional

from .errors import ArchitectureMismatchError, DataError

LANGUAGE_MODEL, TRANSLATION = "language_modeling", "translation"

_WHAT = {LANGUAGE_MODEL: "a language model's", TRANSLATION: "a translation model's"}
#: what reads a checkpoint of each kind, from the command line and from Python
_READERS = {
    LANGUAGE_MODEL: "fairseq-eval-lm and load_language_model read it",
    TRANSLATION: "fairseq-generate, fairseq-interactive and load_translator read it",
}


def task_kind(name) -> Optional[str]:
    """``LANGUAGE_MODEL`` or ``TRANSLATION`` for a fairseq task name, None for any other task."""
    name = str(name or "")
    if name == LANGUAGE_MODEL:
        return LANGUAGE_MODEL
    return TRANSLATION if name.startswith(TRANSLATION) else None


def data_bin_kind(folder: str) -> Optional[str]:
    """The task whose data-bin ``folder`` is, by its dictionaries; None if it holds neither kind."""
    names = os.listdir(folder) if os.path.isdir(folder) else []
    if "dict.txt" in names:
        return LANGUAGE_MODEL
    if any(n.startswith("dict.") and n.endswith(".txt") for n in names):
        return TRANSLATION
    return None


def check_data_bin(folder: str, task: str) -> None:
    """A ``DataError`` naming what ``folder`` is if it is the other ``task``'s data-bin."""
    found = data_bin_kind(folder)
    if task == TRANSLATION and found == LANGUAGE_MODEL:
        raise DataError(
            f"{folder} is a language-model (monolingual) data-bin (dict.txt, no language pair): "
            "--task language_modeling reads it (--arch residual_transformer_lm*, docs/language-models.md); "
            "a translation needs a data-bin of a language pair (data-prep/prepare-*.sh, OUT/bin)"
        )
    if task == LANGUAGE_MODEL and found == TRANSLATION:
        raise DataError(
            f"{folder} is a translation data-bin ({_pair(folder)}, no dict.txt): --task translation reads it "
            "(--arch residual_transformer*); a language model needs a monolingual data-bin "
            "(data-prep/prepare-monolingual.sh, or fairseq-preprocess --only-source)"
        )


def _pair(folder: str) -> str:
    dictionaries = sorted(n for n in os.listdir(folder) if n.startswith("dict.") and n.endswith(".txt"))
    return ", ".join(dictionaries)


def checkpoint_task(state) -> Optional[str]:
    """The task name a checkpoint's contents record, None if they record none."""
    cfg = state.get("cfg")
    if cfg is not None and cfg.get("task") is not None:
        return cfg["task"].get("_name")
    return getattr(state.get("args"), "task", None)


def check_checkpoint(path, trained_task, arch: str, task: str, fix: str) -> None:
    """An ``ArchitectureMismatchError`` naming what the checkpoint ``path`` is (trained with ``--task trained_task
    --arch arch``) if that is the other ``task``'s; ``fix`` says what to give instead, for the command at hand."""
    found = task_kind(trained_task)
    if found is None or found == task or task not in _WHAT:
        return
    raise ArchitectureMismatchError(
        f"{path} is {_WHAT[found]} checkpoint (--task {trained_task}, --arch {arch}): {_READERS[found]}; {fix}"
    )
