"""Average the parameters of several checkpoints into one, with the options of fairseq's
``scripts/average_checkpoints.py`` (which fairseq's installed package does not hold):

    fairseq-residual-average-checkpoints --inputs checkpoints/ --num-epoch-checkpoints 5 --output avg5.pt
    fairseq-residual-average-checkpoints --inputs checkpoints/ --num-update-checkpoints 5 --output avg5.pt
    fairseq-residual-average-checkpoints --inputs a.pt b.pt c.pt --output avg3.pt

Each floating-point tensor of the model is the mean over the inputs, summed in float64 and stored in its own dtype;
the other tensors (the scheme's tag), the config and the training state are the newest input's, newest by the update
count it records. Unlike fairseq's script, the optimizer state is left out: decoding does not need it, and it is
twice the model. The inputs are found by fairseq's ``checkpoint_utils.checkpoint_paths``, read memory-mapped one at a
time (``checkpoint_reading``: a damaged file, or one that carries code, is one line), and the output is written by
fairseq's ``torch_persistent_save``, which the plugin makes write a whole file or none (``checkpoint_saving``).
``scripts/evaluate.sh`` averages with this code.
"""

import argparse
import os
import shutil
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import torch
from fairseq import checkpoint_utils

from fairseq_residual.checkpoint_reading import read_checkpoint, recorded_updates

from .errors import DataError

#: a kind of numbered checkpoint -> the file name fairseq-train gives it, its number (epoch or update) the group
PATTERNS = {"epoch": r"checkpoint(\d+)\.pt", "update": r"checkpoint_\d+_(\d+)\.pt"}


def numbered_checkpoints(folder, kind: str, upper_bound: Optional[int] = None) -> List[Tuple[Path, int]]:
    """The checkpoints of one kind (``PATTERNS``) in ``folder``, newest first, with their numbers; those numbered
    above ``upper_bound`` left out."""
    if not Path(folder).is_dir():
        return []
    found = checkpoint_utils.checkpoint_paths(str(folder), PATTERNS[kind], keep_match=True)
    return [(Path(path), int(number)) for path, number in found if upper_bound is None or number <= upper_bound]


def fill_update_checkpoint(folder, update: int) -> Optional[Path]:
    """fairseq-train writes no ``checkpoint_<epoch>_<update>.pt`` at a ``--save-interval-updates`` multiple that ends
    an epoch (only ``checkpoint_best.pt`` and ``checkpoint_last.pt`` are saved there), so the newest update
    checkpoints averaged would skip it. When ``checkpoint_last.pt`` holds exactly ``update`` and no update checkpoint
    does, it is copied to that name (whole or not at all); returns the file written, else None."""
    folder, last = Path(folder), Path(folder) / "checkpoint_last.pt"
    if not last.is_file() or any(n == update for _, n in numbered_checkpoints(folder, "update")):
        return None
    state = read_checkpoint(str(last))
    if recorded_updates(state) != update:
        return None
    at = (state.get("extra_state") or {}).get("train_iterator", {})
    # at an epoch's end fairseq's iterator state names the next epoch; the file is named for the one that ended
    epoch = at.get("epoch", 1) - (at.get("iterations_in_epoch") == 0)
    target, partial = folder / f"checkpoint_{epoch}_{update}.pt", folder / f"checkpoint_{epoch}_{update}.pt.tmp"
    shutil.copyfile(last, partial)
    os.replace(partial, target)
    return target


def average(paths: Sequence[Path], quiet: bool = False) -> dict:
    """The newest of ``paths``' states, its model's floating-point tensors replaced by their means over ``paths``,
    without the optimizer state."""
    total, newest, newest_updates, first = {}, None, -1, None
    for i, path in enumerate(paths):
        if not quiet:
            print(f"reading {path} ({i + 1} of {len(paths)})", flush=True)
        state = read_checkpoint(str(path))
        params = state["model"]
        if first is None:
            first = {k: v.shape for k, v in params.items()}
            total = {k: torch.zeros(v.shape, dtype=torch.float64) for k, v in params.items() if v.is_floating_point()}
        elif {k: v.shape for k, v in params.items()} != first:
            raise DataError(f"{path} has other parameters than {paths[0]}: not checkpoints of one model")
        for k in total:
            total[k] += params[k].to(torch.float64)
        if recorded_updates(state) >= newest_updates:  # a tie goes to the later input
            newest, newest_updates = state, recorded_updates(state)
    if newest is None:
        raise DataError("no checkpoint to average")
    model = newest["model"]
    averaged = {k: (total[k] / len(paths)).to(v.dtype) if k in total else v for k, v in model.items()}
    return {**{k: v for k, v in newest.items() if k != "last_optimizer_state"}, "model": averaged}


def write_average(paths: Sequence[Path], out: Path, quiet: bool = False) -> Path:
    """``average(paths)`` written to ``out`` (a kill leaves ``out`` as it was, or complete)."""
    checkpoint_utils.torch_persistent_save(average(paths, quiet), str(out))
    return out


def chosen_inputs(inputs: List[str], kind: Optional[str], n: int, upper_bound: Optional[int]) -> List[Path]:
    """The files to average: ``inputs`` themselves, or the newest ``n`` of a kind in the one folder ``inputs`` names."""
    if kind is None:
        if upper_bound is not None:
            raise DataError("--checkpoint-upper-bound needs --num-epoch-checkpoints or --num-update-checkpoints")
        return [Path(p) for p in inputs]
    if len(inputs) != 1 or not Path(inputs[0]).is_dir():
        raise DataError(f"--num-{kind}-checkpoints takes one folder in --inputs (a --save-dir), not {' '.join(inputs)}")
    found = numbered_checkpoints(inputs[0], kind, upper_bound)
    if len(found) < n:
        names = ", ".join(p.name for p, _ in found) or "none"
        bound = f" up to {kind} {upper_bound}" if upper_bound is not None else ""
        raise DataError(
            f"--num-{kind}-checkpoints {n}: {inputs[0]} holds {len(found)} {kind} checkpoints{bound} ({names})"
        )
    return [path for path, _ in found[:n]]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="fairseq-residual-average-checkpoints",
        description="Average the parameters of checkpoints (fairseq's scripts/average_checkpoints.py options).",
    )
    parser.add_argument("--inputs", nargs="+", required=True, help="checkpoint files, or with --num-*: one folder")
    parser.add_argument("--output", required=True, help="the averaged checkpoint to write")
    newest = parser.add_mutually_exclusive_group()
    newest.add_argument("--num-epoch-checkpoints", type=int, help="the newest N checkpoint<epoch>.pt of the folder")
    newest.add_argument(
        "--num-update-checkpoints", type=int, help="the newest N checkpoint_<epoch>_<update>.pt of the folder"
    )
    parser.add_argument(
        "--checkpoint-upper-bound", type=int, help="with --num-*: leave out checkpoints numbered above this"
    )
    args = parser.parse_args(argv)
    counts = {"epoch": args.num_epoch_checkpoints, "update": args.num_update_checkpoints}
    kind, n = next(((k, v) for k, v in counts.items() if v is not None), (None, None))
    if n is not None and n < 1:
        raise DataError(f"--num-{kind}-checkpoints {n}: give at least 1")
    paths = chosen_inputs(args.inputs, kind, n or 0, args.checkpoint_upper_bound)
    write_average(paths, Path(args.output))
    print(f"wrote {args.output}: the average of {len(paths)} checkpoints ({', '.join(p.name for p in paths)})")
    return 0
