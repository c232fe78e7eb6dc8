"""A missing data folder, the other task's data-bin, or one without the language pair or split asked for: one
line, not a traceback.

fairseq's tasks find these out late and deep (``os.listdir`` in ``infer_language_pair``,
``Dictionary.load`` of ``dict.txt``, ``load_langpair_dataset``), so the user gets a ``FileNotFoundError``
traceback or a bare ``Exception: Could not infer language pair``, also under ``fairseq-hydra-train``.
Loading the plugin checks the data folder when a task is set up for training, generation or
``fairseq-eval-lm`` (``tasks.setup_task``; not when a model is loaded from a checkpoint, which names the
folder it was trained on): a language model's data-bin given to a translation, or the reverse, is named as
such (``task_kinds``), and a missing split is named, raising ``DataError`` each time.
"""

import functools
import os
from pathlib import Path

from fairseq import tasks, utils
from fairseq.data import data_utils
from fairseq.file_io import PathManager
from fairseq.tasks import translation

from .errors import DataError
from .task_kinds import LANGUAGE_MODEL, TRANSLATION, check_data_bin, data_bin_kind

_MAKE_DATA = "make one with data-prep/ (it writes OUT/bin) or fairseq-preprocess"


def _task_name(cfg) -> str:
    name = getattr(cfg, "_name", None) or getattr(cfg, "task", None)
    return name if isinstance(name, str) else ""


def check_data_folder(cfg) -> None:
    data = getattr(cfg, "data", None)
    if not isinstance(data, str) or not data:
        return
    paths = [p for p in utils.split_paths(data) if not PathManager.path_requires_pathmanager(p)]
    for path in paths:
        if not os.path.isdir(path):
            raise DataError(f"data folder {path} does not exist: correct the path, or {_MAKE_DATA}")
    task = _task_name(cfg)
    if task in (TRANSLATION, LANGUAGE_MODEL) and paths:
        check_data_bin(paths[0], task)
    if task == TRANSLATION and paths:
        _check_language_pair(paths[0], getattr(cfg, "source_lang", None), getattr(cfg, "target_lang", None))
    if task == LANGUAGE_MODEL and paths and data_bin_kind(paths[0]) is None:
        raise DataError(
            f"{paths[0]} holds no dict.txt, so no language-model data-bin: give the data-bin folder itself "
            f"(OUT/bin for data-prep/prepare-monolingual.sh), or make one with it or fairseq-preprocess --only-source"
        )


def _check_language_pair(folder: str, src, tgt) -> None:
    found = data_utils.infer_language_pair(folder)
    if src is None or tgt is None:
        if None in found:
            raise DataError(
                f"{folder} holds no binarised training data (train.<src>-<tgt>.<lang>.bin): give the "
                f"data-bin folder itself (OUT/bin for data-prep/), or {_MAKE_DATA}"
            )
        return
    languages = sorted(p.name[len("dict.") : -len(".txt")] for p in Path(folder).glob("dict.*.txt"))
    for option, lang in (("--source-lang", src), ("--target-lang", tgt)):
        if lang not in languages:
            has = f"the pair {found[0]}-{found[1]}" if None not in found else f"dictionaries for {languages}"
            raise DataError(
                f"{option} {lang}: data folder {folder} has {has} (no dict.{lang}.txt); pass the languages of "
                f"the data folder (task.source_lang/target_lang in hydra), or prepare data for {src}-{tgt}"
            )


def _checking_setup_task(setup_task):
    @functools.wraps(setup_task)
    def setup(cfg, **kwargs):
        if not kwargs.get("from_checkpoint", False):
            check_data_folder(cfg)
        return setup_task(cfg, **kwargs)

    setup.fairseq_residual = True  # type: ignore[attr-defined]  # the mark that it is applied
    return setup


_PREPROCESS_OPTION = {"train": "--trainpref", "valid": "--validpref", "test": "--testpref"}


def _reporting_load_langpair_dataset(load_langpair_dataset):
    @functools.wraps(load_langpair_dataset)
    def load(data_path, split, src, src_dict, tgt, tgt_dict, *args, **kwargs):
        try:
            return load_langpair_dataset(data_path, split, src, src_dict, tgt, tgt_dict, *args, **kwargs)
        except FileNotFoundError as error:
            if not str(error).startswith("Dataset not found"):  # fairseq's own message for a missing split
                raise
            option = _PREPROCESS_OPTION.get(split, "--trainpref/--validpref/--testpref")
            raise DataError(
                f"data folder {data_path} has no '{split}' split for {src}-{tgt} (no {split}.{src}-{tgt}.{src}.bin): "
                f"binarise it with fairseq-preprocess {option} (data-prep/ makes train, valid and test), "
                "or choose a split that exists"
            ) from error

    load.fairseq_residual = True  # type: ignore[attr-defined]  # the mark that it is applied
    return load


def apply() -> None:
    if not getattr(tasks.setup_task, "fairseq_residual", False):
        tasks.setup_task = _checking_setup_task(tasks.setup_task)
    if not getattr(translation.load_langpair_dataset, "fairseq_residual", False):
        translation.load_langpair_dataset = _reporting_load_langpair_dataset(translation.load_langpair_dataset)
