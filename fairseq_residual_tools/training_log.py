"""Reading fairseq training logs, and the one rule that calls a run "fails".

The paper reports a training that diverges as "fails". The same rule is used by
the reproduction tables and the CPU-scale study:

* the training loss became NaN or infinite (or fairseq stopped on a NaN /
  "minimum loss scale reached" error), or
* the loss exploded: a logged training loss above ``EXPLODE_FACTOR`` times the
  lowest one seen before it, after the first ``WARMUP_POINTS`` log points, or
* no progress: with more than ``WARMUP_POINTS`` log points, the last logged
  training loss is not below ``NO_PROGRESS_FRACTION`` of the first one.

Training losses are the per-interval ``train_inner`` values; a log that has
none (``--log-interval`` longer than an epoch) falls back to the epoch averages.
"""

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

EXPLODE_FACTOR = 2.0
WARMUP_POINTS = 3
NO_PROGRESS_FRACTION = 0.9

_NAN_MESSAGES = ("nan", "Minimum loss scale reached", "FloatingPointError")
_SIMPLE = re.compile(r"\bnum_updates[ =](\d+)\b")
_SIMPLE_LOSS = re.compile(r"(?:\| |\s)loss[ =]([^\s,|]+)")


@dataclass
class TrainLog:
    train: List[Tuple[int, float]]  # (num_updates, training loss) of each logged interval
    valid: List[Tuple[int, float]]  # (num_updates, validation loss)
    nan_error: bool  # fairseq reported a NaN / loss-scale failure


def _loss(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def parse_log(text: str) -> TrainLog:
    """Parse ``--log-format json`` or ``simple`` lines of fairseq-train / fairseq-hydra-train."""
    inner, summary, valid, nan_error = [], [], [], False
    for line in text.splitlines():
        if any(m in line for m in _NAN_MESSAGES[1:]) or "loss is nan" in line.lower():
            nan_error = True
        brace = line.find("{")
        if brace >= 0 and '"' in line[brace:]:
            try:
                rec = json.loads(line[brace:])
            except json.JSONDecodeError:
                rec = None
            if isinstance(rec, dict):
                if "valid_loss" in rec:
                    valid.append((int(rec.get("valid_num_updates", 0)), _loss(rec["valid_loss"])))
                elif "loss" in rec and "num_updates" in rec and "update" in rec:
                    inner.append((int(rec["num_updates"]), _loss(rec["loss"])))
                elif "train_loss" in rec and "train_num_updates" in rec:
                    summary.append((int(rec["train_num_updates"]), _loss(rec["train_loss"])))
                continue
        match, loss = _SIMPLE.search(line), _SIMPLE_LOSS.search(line)
        if match and loss:
            if "valid on" in line:
                target = valid
            elif "| train |" in line:
                target = summary
            else:
                target = inner
            target.append((int(match.group(1)), _loss(loss.group(1))))
    # per-interval losses when logged; end-of-epoch averages (which lag) otherwise
    return TrainLog(train=inner or summary, valid=valid, nan_error=nan_error)


def read_log(path) -> TrainLog:
    return parse_log(Path(path).read_text(encoding="utf-8", errors="replace"))


def divergence(log: TrainLog) -> Optional[str]:
    """The reason the run counts as failed, or None if it trained."""
    if log.nan_error:
        return "loss became NaN (fairseq stopped)"
    losses = [loss for _, loss in log.train]
    if any(not math.isfinite(x) for x in losses):
        return "training loss became NaN/inf"
    best = math.inf
    for i, loss in enumerate(losses):
        if i >= WARMUP_POINTS and loss > EXPLODE_FACTOR * best:
            return f"training loss exploded ({loss:.3g} > {EXPLODE_FACTOR} x best {best:.3g})"
        best = min(best, loss)
    if len(losses) > WARMUP_POINTS and losses[-1] >= NO_PROGRESS_FRACTION * losses[0]:
        return f"no progress (loss {losses[0]:.3g} -> {losses[-1]:.3g})"
    return None
