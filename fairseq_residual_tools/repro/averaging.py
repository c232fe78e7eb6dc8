"""Averaging the parameters of the last N checkpoints, as fairseq's ``scripts/average_checkpoints.py``.

That script is not in the installed ``fairseq`` package, so its logic is restated here: the mean of every
floating-point tensor (integer ones, such as counters, are the newest checkpoint's), written into the
newest checkpoint's state, without the optimizer state (decoding does not need it; it is twice the model).
"""

import re
from pathlib import Path
from typing import List

import torch

from ..errors import DataError

_EPOCH = re.compile(r"^checkpoint(\d+)\.pt$")
_UPDATE = re.compile(r"^checkpoint_(\d+)_(\d+)\.pt$")


def last_checkpoints(folder, n: int, kind: str) -> List[Path]:
    """The newest ``n`` checkpoints of one kind, oldest first.

    kind "epoch": ``checkpoint<epoch>.pt``; kind "update": ``checkpoint_<epoch>_<update>.pt``.
    A folder that has none of that kind gives ``checkpoint_last.pt`` alone.
    """
    folder = Path(folder)
    pattern, key = (_EPOCH, lambda m: int(m[1])) if kind == "epoch" else (_UPDATE, lambda m: int(m[2]))
    found = sorted((key(m), p) for p in folder.glob("checkpoint*.pt") if (m := pattern.match(p.name)))
    paths = [p for _, p in found[-n:]]
    if not paths and (folder / "checkpoint_last.pt").is_file():
        paths = [folder / "checkpoint_last.pt"]
    if not paths:
        raise DataError(f"no checkpoint in {folder}: train the cell first (scripts/train.sh)")
    return paths


def average_checkpoints(paths: List[Path], out: Path) -> Path:
    """Write the mean of ``paths``' parameters to ``out`` (same tensor dtypes as the inputs)."""
    for i, path in enumerate(paths):
        state = torch.load(path, map_location="cpu", weights_only=True)
        params = state["model"]
        if i == 0:
            total = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in params.items() if v.is_floating_point()}
            keys = params.keys()
        elif params.keys() != keys:
            raise DataError(f"{path} has other parameters than {paths[0]}: not checkpoints of one model")
        for k in total:
            total[k] += params[k].to(torch.float64)
    # the newest checkpoint, its floating-point tensors replaced by the means (counters and the like stay its own)
    newest = state
    newest["model"] = {k: (total[k] / len(paths)).to(v.dtype) if k in total else v for k, v in params.items()}
    newest.pop("last_optimizer_state", None)
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    torch.save(newest, tmp)
    tmp.replace(out)
    return out
