"""Reading checkpoints: resume past an unreadable ``checkpoint_last.pt``, one line for a bad ``--path``.

With ``checkpoint_saving`` a kill no longer leaves a partial checkpoint, but a save dir can still
hold one (written before the plugin was loaded, on a full disk, copied in part by hand). fairseq
then stops at "Preparing to load checkpoint" with a traceback on every start, so a requeued job
never runs again. Loading the plugin changes this:

* resuming (``Trainer.load_checkpoint``) from an unreadable ``checkpoint_last.pt`` falls back to
  the newest readable checkpoint of the same folder, newest by the update count recorded inside
  (file times change when files are copied), with one warning line naming both files; when none
  can be read, or an explicit ``--restore-file`` cannot, the run stops with one ``error:`` line;
* under FSDP with ``--use-sharded-state`` (each rank resumes from its own ``checkpoint_last-shardN.pt``)
  the fallback is decided once for all ranks (``agreed_resume_path``): the newest checkpoint every
  rank can read, so that no rank resumes at another update than the others;
* resuming, generating or scoring with a checkpoint of the other task (a language model's for a translation,
  or the reverse) says what the checkpoint is and what reads it (``task_kinds``);
* resuming a checkpoint of another architecture names both architectures; resuming or generating
  with other dimensions (``--encoder-ffn-embed-dim``, ``--model-overrides``, ...) names the options and
  both values; a data folder whose dictionary is not the checkpoint's says whether it is the folder the
  checkpoint was trained on, prepared again with other options, or another one, with both sizes and the
  fix for the command that was run (resuming or generating);
* ``fairseq-generate`` / ``fairseq-interactive`` (``load_model_ensemble_and_task`` and
  ``load_checkpoint_to_cpu``) on a missing or truncated ``--path`` stop with one line naming it;
* a checkpoint that torch's safe loading refuses because its pickle calls code (``os.system``, any global
  outside the allowlist of ``checkpoint_loading``) stops with one line naming the file and the globals
  (``refusal``), for ``--path`` and for resuming; nothing in it runs;
* resuming after the first epoch continues with the batches the uninterrupted run uses
  (``same_batches_every_epoch``), so that a resumed run ends bit-identical to an uninterrupted one.

"Unreadable" is decided from the file, not from torch's message: a checkpoint is a zip archive
whose directory sits at its end, so a truncated file is one that ``zipfile`` cannot open and torch
cannot load (the legacy pre-zip format is tried in full). Any other failure to load (a class
outside the safe-loading allowlist, say) is another problem and keeps its own error.
"""

import functools
import inspect
import logging
import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

import torch
from fairseq import checkpoint_utils
from fairseq.file_io import PathManager
from fairseq.tasks import TASK_REGISTRY, FairseqTask
from fairseq.trainer import Trainer

from .errors import (
    ArchitectureMismatchError,
    CheckpointFileError,
    CheckpointMismatchError,
    DictionaryChangedError,
    DimensionMismatchError,
    UnsafeCheckpointError,
)
from .task_kinds import check_checkpoint, checkpoint_task, task_kind

logger = logging.getLogger(__name__)


def damage(path: str) -> Optional[str]:
    """Why ``path`` is not a complete checkpoint file ("does not exist", ...), or None if it looks whole."""
    if not os.path.isfile(path):
        return "does not exist"
    size = os.path.getsize(path)
    if size == 0:
        return "is empty (0 bytes)"
    try:
        with zipfile.ZipFile(path):
            return None
    except (zipfile.BadZipFile, OSError):
        return f"is truncated or not a checkpoint ({size:,} bytes, no complete zip archive)"


class _Unreadable(Exception):
    """``str()`` is what is wrong with the file, as ``damage`` words it."""


def refusal(path: str, error: BaseException) -> Optional[UnsafeCheckpointError]:
    """The one-line error for a checkpoint that torch's safe loading refused (``error``) because its pickle calls
    code, naming the globals it holds (read from the file without running them); None for any other error."""
    if _find(error, pickle.UnpicklingError) is None:
        return None
    unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    if not unsafe:
        return None
    return UnsafeCheckpointError(
        f"{path} is not a plain fairseq checkpoint: it holds the global{'s' if len(unsafe) > 1 else ''} "
        f"{', '.join(unsafe)}, which loading would run as code (torch's safe loading refused it); only if you "
        "trust the file and where it came from, load it with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 in the environment"
    )


def _load_lazily(path: str):
    """The checkpoint's contents with tensors memory-mapped (cheap for any size); ``_Unreadable`` if damaged."""
    reason = damage(path)
    if reason is None:
        try:
            return torch.load(path, map_location="cpu", mmap=True)
        except pickle.UnpicklingError as error:
            refused = refusal(path, error)
            if refused is None:
                raise
            raise refused from error
    if os.path.isfile(path) and os.path.getsize(path) > 0:
        try:  # the legacy (pre-zip) format is not a zip archive and cannot be memory-mapped
            return torch.load(path, map_location="cpu")
        except Exception:
            pass
    raise _Unreadable(reason)


def read_checkpoint(path: str):
    """The contents of the checkpoint file ``path``, its tensors memory-mapped; one line (``CheckpointFileError``,
    ``UnsafeCheckpointError``) when it cannot be read."""
    try:
        return _load_lazily(path)
    except _Unreadable as unreadable:
        raise CheckpointFileError(f"cannot read checkpoint {path}: it {unreadable}") from None


def recorded_updates(state) -> int:
    history = state.get("optimizer_history") or [{}]
    return int(history[-1].get("num_updates", 0))


def _same_run_checkpoints(folder: str, suffix: str):
    """The files fairseq's ``save_checkpoint`` names for this ``--checkpoint-suffix``, except last."""
    pattern = re.compile(r"checkpoint(\d+|_\d+_\d+|_best|\.best_.+)" + re.escape(suffix) + r"\.pt")
    return [str(p) for p in sorted(Path(folder).iterdir()) if pattern.fullmatch(p.name)]


def resume_path(path: str) -> str:
    """``path`` if it can be read; for an unreadable ``checkpoint_last*.pt``, the newest readable sibling."""
    try:
        _load_lazily(path)
        return path
    except _Unreadable as unreadable:
        reason = str(unreadable)
    folder, name = os.path.split(os.path.abspath(path))
    last = re.fullmatch(r"checkpoint_last(.*)\.pt", name)
    if last is None:
        raise CheckpointFileError(
            f"cannot resume from {path}: it {reason}; pass --restore-file a complete checkpoint, "
            "or leave --restore-file out to resume from the save dir's checkpoint_last.pt"
        )
    updates = {}
    for other in _same_run_checkpoints(folder, last.group(1)):
        try:
            updates[other] = recorded_updates(_load_lazily(other))
        except _Unreadable:
            continue
    if not updates:
        raise CheckpointFileError(
            f"cannot resume in {folder}: {name} {reason} and no other checkpoint there can be read; "
            f"to start training over, move {folder} away (or use another --save-dir)"
        )
    newest = max(updates, key=lambda p: (updates[p], p))
    logger.warning(
        f"{path} {reason}; resuming from {newest} ({updates[newest]} updates), "
        f"the newest readable checkpoint in {folder}"
    )
    return newest


def _readable_updates(path: str) -> Optional[int]:
    try:
        return recorded_updates(_load_lazily(path))
    except _Unreadable:
        return None


def resume_choices(path: str) -> Dict[str, int]:
    """The checkpoints that resuming from ``checkpoint_last<suffix>.pt`` could use, readable here: their names
    without the suffix (one rank's ``-shardN``) -> the update count they record."""
    folder, name = os.path.split(os.path.abspath(path))
    suffix = re.fullmatch(r"checkpoint_last(.*)\.pt", name).group(1)  # type: ignore[union-attr]
    siblings = _same_run_checkpoints(folder, suffix) if os.path.isdir(folder) else []
    choices = {}
    for candidate in [path, *siblings]:
        updates = _readable_updates(candidate)
        if updates is not None:
            choices[os.path.basename(candidate)[: -len(suffix) - 3] + ".pt"] = updates
    return choices


def agreed_resume_path(path: str) -> str:
    """``resume_path`` decided once for every rank, when each rank resumes from its own shard of the state.

    Each rank can read other files (a kill truncates one rank's ``checkpoint_last-shard1.pt`` only):
    deciding per rank would resume rank 0 at its last update and rank 1 at an older one. Here every rank
    resumes from ``checkpoint_last`` if every rank can read it at one update count, else from the newest
    checkpoint that every rank can read at one update count; with none, every rank stops with one line.
    A collective: every rank of the default process group calls it."""
    import torch.distributed as dist

    folder, name = os.path.split(os.path.abspath(path))
    suffix = re.fullmatch(r"checkpoint_last(.*)\.pt", name).group(1)  # type: ignore[union-attr]
    everyone: List[Dict[str, int]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(everyone, resume_choices(path))
    if not any(everyone):
        return path  # no rank has a checkpoint: every rank starts training from the beginning
    common = {n: u for n, u in everyone[0].items() if all(choices.get(n) == u for choices in everyone)}
    if "checkpoint_last.pt" in common:
        return path
    if not common:
        raise CheckpointFileError(
            f"cannot resume in {folder}: no checkpoint there can be read by every rank at one update count "
            f"(each rank's readable ones: {everyone}); to start training over, move {folder} away"
        )
    newest = max(common, key=lambda n: (common[n], n))
    chosen = os.path.join(folder, newest[:-3] + suffix + ".pt")
    logger.warning(
        f"{path} cannot be resumed on every rank at one update count; every rank resumes from its "
        f"{newest[:-3]}<shard>.pt ({common[newest]} updates), the newest that all ranks can read"
    )
    return chosen


def _sharded_across_ranks(trainer) -> bool:
    """Whether each rank resumes from its own file (fairseq's ``-shardN`` suffix under FSDP)."""
    import torch.distributed as dist

    sharded = getattr(trainer, "is_fsdp", False) and trainer.cfg.distributed_training.use_sharded_state
    return bool(sharded) and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _architecture(model_cfg) -> str:
    """The ``--arch`` recorded in a model config (a dict, DictConfig or legacy Namespace)."""
    get = model_cfg.get if hasattr(model_cfg, "get") else lambda key, default=None: getattr(model_cfg, key, default)
    return str(get("arch", None) or get("_name", None) or "unknown")


def _trained_architecture(state) -> str:
    if state.get("cfg") is not None and state["cfg"].get("model") is not None:
        return _architecture(state["cfg"]["model"])
    return _architecture(state.get("args") or {})


#: the model options that decide the parameters' shapes (and the heads, which a reader would check next)
SHAPE_OPTIONS = [
    f"{side}_{option}"
    for side in ("encoder", "decoder")
    for option in ("layers", "embed_dim", "ffn_embed_dim", "attention_heads")
] + ["decoder_input_dim", "decoder_output_dim"]

_SIZE_MISMATCH = re.compile(
    r"size mismatch for ([\w.]+): copying a param with shape torch\.Size\(\[(\d+)(?:, \d+)*\]\) from checkpoint, "
    r"the shape in current model is torch\.Size\(\[(\d+)(?:, \d+)*\]\)"
)


def _option(model_cfg, key):
    get = model_cfg.get if hasattr(model_cfg, "get") else lambda k, default=None: getattr(model_cfg, k, default)
    return get(key, None)


def _trained_model_cfg(state):
    if state.get("cfg") is not None and state["cfg"].get("model") is not None:
        return state["cfg"]["model"]
    return state.get("args") or {}


def _shape_mismatch(error: Exception, filename: str, run_option, data: str, resuming: bool):
    """The one-line error for parameters of other shapes than the checkpoint's, or None.

    ``run_option(key)`` is this run's value of a model option (None where it keeps the checkpoint's); ``resuming``:
    training resumes from the checkpoint (else fairseq-generate, fairseq-interactive or the hub loads it)."""
    messages: List[BaseException] = []
    cause: Optional[BaseException] = error
    while cause is not None and cause not in messages:
        messages.append(cause)
        cause = cause.__cause__ or cause.__context__
    text = "\n".join(str(e) for e in messages)
    if not any(s in text for s in ("size mismatch for", "Missing key(s)", "Unexpected key(s)")):
        return None
    state = _load_lazily(filename)
    trained_cfg = _trained_model_cfg(state)
    differ = []
    for key in SHAPE_OPTIONS:
        trained, running = _option(trained_cfg, key), run_option(key)
        if trained is not None and running is not None and trained != running:
            differ.append((f"--{key.replace('_', '-')}", trained, running))
    if differ:
        trained_text = ", ".join(f"{option} {trained}" for option, trained, _ in differ)
        running_text = ", ".join(f"{option} {running}" for option, _, running in differ)
        fix = "use the checkpoint's values, or train the new ones in another --save-dir"
        return DimensionMismatchError(
            f"{filename} was trained with {trained_text}, but this run uses {running_text}; "
            + (fix if resuming else "leave them out of --model-overrides to use the checkpoint's")
        )
    rows = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in _SIZE_MISMATCH.finditer(text)}
    vocabulary = [rows[k] for k in rows if k.endswith(("embed_tokens.weight", "output_projection.weight"))]
    if vocabulary and len(vocabulary) == len(rows):
        then, now = vocabulary[0]
        return _dictionary_mismatch(filename, _trained_data(state), data, (then, now), resuming)
    return None


def _trained_data(state) -> Optional[str]:
    """The data folder the checkpoint's training read, as its command line gave it."""
    if state.get("cfg") is not None and state["cfg"].get("task") is not None:
        return state["cfg"]["task"].get("data")
    return getattr(state.get("args"), "data", None)


def _dictionary_mismatch(filename: str, trained_on: Optional[str], data: str, words, resuming: bool):
    """The data folder's dictionary is not the checkpoint's: the same folder prepared again (or a folder the
    checkpoint does not name), or another folder altogether; the fix for the command that loads it."""
    then, now = words
    if trained_on is not None and os.path.realpath(trained_on) != os.path.realpath(data):
        what = f"{filename} was trained on {trained_on} ({then} words in its dictionary), not on {data} ({now} words)"
        fix = f"{'resume with' if resuming else 'give'} the data folder it was trained on ({trained_on})"
        fix += f", or train on {data} in another --save-dir" if resuming else ""
    else:
        what = (
            f"the dictionary of {data} changed since {filename} was trained on it: {then} words then, {now} words "
            "now (data preparation re-run with other options?)"
            if trained_on is not None
            else f"the dictionary of {data} has {now} words, {filename} was trained with {then}"
        )
        fix = "re-run data preparation with the options the model was trained with"
        fix += ", or train on the new data in another --save-dir" if resuming else ""
    return DictionaryChangedError(f"{what}; {fix}")


def check_checkpoint_task(path: str, task: str, fix: str) -> None:
    """One line (``task_kinds``) if the checkpoint ``path`` was trained for the other task than ``task`` (a language
    model's for a translation, or the reverse); ``fix`` says what to give instead."""
    state = read_checkpoint(path)
    check_checkpoint(path, checkpoint_task(state), _trained_architecture(state), task, fix)


def _check_task(path: str, task, resuming: bool) -> None:
    """``check_checkpoint_task`` for the running fairseq ``task``, found by its class (its ``cfg`` does not always
    hold its name: ``language_modeling``'s is None), with the fix for resuming or for ``--path``."""
    kind = task_kind(next((name for name, cls in TASK_REGISTRY.items() if cls is type(task)), None))
    if kind is None:
        return
    if resuming:
        fix = f"this run trains with --task {kind}: give it another --save-dir, or --restore-file a checkpoint"
    else:
        fix = f"this command runs --task {kind}: give --path a checkpoint"
    check_checkpoint_task(path, kind, f"{fix} trained with --task {kind}")


def _data_folder(task) -> str:
    return str(getattr(getattr(task, "cfg", None), "data", None) or "the data folder")


def _resuming_load_checkpoint(load_checkpoint):
    @functools.wraps(load_checkpoint)
    def load(self, filename, *args, **kwargs):
        local = not PathManager.path_requires_pathmanager(filename)
        last = re.fullmatch(r"checkpoint_last.*\.pt", os.path.basename(filename))
        if local and last and _sharded_across_ranks(self):
            filename = agreed_resume_path(filename)  # on every rank, whether or not its file exists
        elif os.path.lexists(filename) and local:
            filename = resume_path(filename)
        if local and damage(filename) is None:
            _check_task(filename, getattr(self, "task", None), resuming=True)
        try:
            return load_checkpoint(self, filename, *args, **kwargs)
        except Exception as error:
            mismatch = _architecture_mismatch(error, filename, self.cfg.model)
            if mismatch is None and damage(filename) is None:
                run_option = functools.partial(_option, self.cfg.model)
                mismatch = _shape_mismatch(error, filename, run_option, _data_folder(self.task), resuming=True)
            if mismatch is None:
                raise
            raise mismatch from error

    load.fairseq_residual = True  # type: ignore[attr-defined]  # the mark that it is applied
    return load


def _architecture_mismatch(error: Exception, filename: str, run_model_cfg) -> Optional[ArchitectureMismatchError]:
    """The one-line error for a model that cannot take the checkpoint's parameters, naming both ``--arch``."""
    scheme_mismatch = _find(error, CheckpointMismatchError)
    if damage(filename) is not None or (
        scheme_mismatch is not None and not isinstance(scheme_mismatch, ArchitectureMismatchError)
    ):
        return None  # no checkpoint was loaded, or the residual scheme's own message names both sides
    trained, running = _trained_architecture(_load_lazily(filename)), _architecture(run_model_cfg)
    if scheme_mismatch is None and not (str(error).startswith("Cannot load model parameters") and trained != running):
        return None
    return ArchitectureMismatchError(
        f"{filename} was trained with --arch {trained}, but this run uses --arch {running}; "
        f"resume it with --arch {trained}, or train --arch {running} in another --save-dir"
    )


def _find(error: Optional[BaseException], cls):
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, cls):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _reporting_load_checkpoint_to_cpu(load_checkpoint_to_cpu):
    @functools.wraps(load_checkpoint_to_cpu)
    def load(path, *args, **kwargs):
        try:
            return load_checkpoint_to_cpu(path, *args, **kwargs)
        except Exception as error:
            if PathManager.path_requires_pathmanager(path):
                raise
            reason = damage(path)
            if reason is not None:
                raise CheckpointFileError(f"cannot load checkpoint {path}: it {reason}; {_PATH_FIX}") from error
            refused = refusal(path, error)
            if refused is None:
                raise
            raise refused from error

    load.fairseq_residual = True  # type: ignore[attr-defined]  # the mark that it is applied
    return load


_PATH_FIX = "give --path a complete checkpoint written by fairseq-train (e.g. checkpoints/checkpoint_best.pt)"


def _checking_load_model_ensemble_and_task(load_model_ensemble_and_task):
    """Name a missing ``--path`` file before fairseq's ``OSError: Model file not found``."""
    signature = inspect.signature(load_model_ensemble_and_task)

    @functools.wraps(load_model_ensemble_and_task)
    def load(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        if a["state"] is None:
            for filename in a["filenames"]:
                for shard in range(a["num_shards"]):
                    name = checkpoint_utils.get_maybe_sharded_checkpoint_filename(
                        filename, a["suffix"], shard, a["num_shards"]
                    )
                    on_disk = not PathManager.path_requires_pathmanager(name)
                    if on_disk and not os.path.exists(name):
                        raise CheckpointFileError(f"checkpoint {name} does not exist; {_PATH_FIX}")
                    if on_disk and damage(name) is None:
                        _check_task(name, a["task"], resuming=False)  # the hub gives no task: it checks its own
        try:
            return load_model_ensemble_and_task(*args, **kwargs)
        except Exception as error:
            local = [f for f in a["filenames"] if not PathManager.path_requires_pathmanager(f) and damage(f) is None]
            overrides = a["arg_overrides"] or {}
            mismatch = None
            for filename in local:
                data = _data_folder(a["task"])
                mismatch = mismatch or _shape_mismatch(error, filename, overrides.get, data, resuming=False)
            if mismatch is None:
                raise
            raise mismatch from error

    load.fairseq_residual = True  # type: ignore[attr-defined]  # the mark that it is applied
    return load


def same_batches_every_epoch(get_batch_iterator):
    """Build a reusable training iterator's batches as the uninterrupted run does, whatever the epoch.

    fairseq's ``FairseqTask.get_batch_iterator`` makes the batches (``make_batches``) once per dataset
    and reuses them in every later epoch, only shuffling their order with the seed + epoch. Which
    sentences go together depends on the epoch the iterator is made in: ``ordered_indices`` breaks
    ties between sentences of equal length with a permutation drawn under ``numpy_seed(seed + epoch)``.
    An uninterrupted run makes it in epoch 1; a run resumed in epoch N loads the dataset again and
    makes it in epoch N, so from then on its batches hold other sentences (of the same lengths: same
    batch sizes, other losses). Measured before this change: resuming at update 27, the first update of
    epoch 2 (26 per epoch), or at update 35, ended 2 updates later with parameters 0.0009 and 0.0016 away
    from the uninterrupted run's; resuming inside epoch 1 was exact. Here a reusable iterator's batches
    are always made with epoch 1's seed; the iterator still starts at the epoch asked for. Batches that
    fairseq rebuilds every epoch anyway (``rebuild_batches``, sharded data, the cache disabled) are
    left as they are: both runs make them in the same epoch.
    """
    signature = inspect.signature(get_batch_iterator)

    @functools.wraps(get_batch_iterator)
    def get(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        reusable = (
            not a["disable_iterator_cache"]
            and not a["update_epoch_batch_itr"]
            and self.can_reuse_epoch_itr(a["dataset"])
            and not getattr(self.cfg, "rebuild_batches", False)
        )
        epoch = a["epoch"]
        if epoch <= 1 or not reusable or a["dataset"] in self.dataset_to_epoch_iter:
            return get_batch_iterator(*bound.args, **bound.kwargs)
        a["epoch"] = 1
        epoch_iterator = get_batch_iterator(*bound.args, **bound.kwargs)
        epoch_iterator.epoch = epoch
        a["dataset"].set_epoch(epoch)
        return epoch_iterator

    get.fairseq_residual = True  # type: ignore[attr-defined]
    return get


def apply() -> None:
    if not getattr(FairseqTask.get_batch_iterator, "fairseq_residual", False):
        FairseqTask.get_batch_iterator = same_batches_every_epoch(FairseqTask.get_batch_iterator)
    if not getattr(Trainer.load_checkpoint, "fairseq_residual", False):
        Trainer.load_checkpoint = _resuming_load_checkpoint(Trainer.load_checkpoint)
    if not getattr(checkpoint_utils.load_checkpoint_to_cpu, "fairseq_residual", False):
        checkpoint_utils.load_checkpoint_to_cpu = _reporting_load_checkpoint_to_cpu(
            checkpoint_utils.load_checkpoint_to_cpu
        )
    if not getattr(checkpoint_utils.load_model_ensemble_and_task, "fairseq_residual", False):
        checkpoint_utils.load_model_ensemble_and_task = _checking_load_model_ensemble_and_task(
            checkpoint_utils.load_model_ensemble_and_task
        )
