"""Reading fairseq training logs, and the one rule that calls a run "fails" (the paper's word for a
training that diverges), used by the reproduction tables and the CPU-scale study: a NaN/inf loss, an exploding
loss, no progress, or a plateau (``divergence``; ``RULE`` says it in one sentence for reports).

The plateau is how Post-LN fails at small scale: its loss drops quickly to about the loss of predicting target
tokens by their frequency alone and stays there, below 0.9x the first loss, so the no-progress test passes it.
The level condition keeps a converged run, flat far below where it started, from counting as stuck. Thresholds
from the CPU study's recorded curves (results/cpu-study/results.json): its stuck Post-LN runs fell 0.7-1.4 %
over their last two thirds, every run that kept learning 2.7 % or more.
"""

import json
import math
import re
import statistics
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Optional, Tuple

EXPLODE_FACTOR = 2.0
WARMUP_POINTS = 3
NO_PROGRESS_FRACTION = 0.9
PLATEAU_MIN_POINTS = 9
PLATEAU_DROP = 0.02
PLATEAU_LEVEL = 0.6
RULE = (
    f"NaN/inf loss, a training loss above {EXPLODE_FACTOR:g}x the best before it, a last loss not below "
    f"{NO_PROGRESS_FRACTION:g}x the first, or a plateau: less than {PLATEAU_DROP:.0%} lower over the last two thirds "
    f"of the curve while still above {PLATEAU_LEVEL:g}x the first loss"
)

_NAN_MESSAGES = ("Minimum loss scale reached", "FloatingPointError")
_SIMPLE = re.compile(r"\bnum_updates[ =](\d+)\b")
_SIMPLE_LOSS = re.compile(r"(?:\| |\s)loss[ =]([^\s,|]+)")


@dataclass
class TrainLog:
    train: List[Tuple[int, float]]  # (num_updates, training loss) of each logged interval
    valid: List[Tuple[int, float]]  # (num_updates, validation loss)
    nan_error: bool  # fairseq reported a NaN / loss-scale failure


def json_record(line: str) -> Optional[dict]:
    """The JSON record of a ``--log-format json`` line (after fairseq's prefix), or None."""
    try:
        return json.loads(line[line.index("{") :])
    except ValueError:  # no brace, or no JSON after it
        return None


def parse_log(text: str) -> TrainLog:
    """Parse ``--log-format json`` or ``simple`` lines of fairseq-train / fairseq-hydra-train."""
    inner, summary, valid, nan_error = [], [], [], False
    for line in text.splitlines():
        if any(m in line for m in _NAN_MESSAGES) or "loss is nan" in line.lower():
            nan_error = True
        rec = json_record(line)
        if rec is not None:
            if "valid_loss" in rec:
                valid.append((int(rec.get("valid_num_updates", 0)), float(rec["valid_loss"])))
            elif "loss" in rec and "num_updates" in rec and "update" in rec:
                inner.append((int(rec["num_updates"]), float(rec["loss"])))
            elif "train_loss" in rec and "train_num_updates" in rec:
                summary.append((int(rec["train_num_updates"]), float(rec["train_loss"])))
            continue
        match, loss = _SIMPLE.search(line), _SIMPLE_LOSS.search(line)
        if match and loss:
            if "valid on" in line:
                target = valid
            elif "| train |" in line:
                target = summary
            else:
                target = inner
            target.append((int(match.group(1)), float(loss.group(1))))
    # per-interval losses when logged, end-of-epoch averages (which lag) otherwise (``--log-interval`` longer
    # than an epoch); the latest value logged for each update (a resumed run logs some again), in update order
    train, valid = (sorted(dict(points).items()) for points in (inner or summary, valid))
    return TrainLog(train=train, valid=valid, nan_error=nan_error)


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
    if len(losses) >= PLATEAU_MIN_POINTS:
        third = len(losses) // 3
        before, after = statistics.fmean(losses[third - 1 : third + 2]), statistics.fmean(losses[-3:])
        if after > (1 - PLATEAU_DROP) * before and after >= PLATEAU_LEVEL * losses[0]:
            return (
                f"stuck on a plateau (loss {before:.3g} at update {log.train[third][0]} -> {after:.3g} at the end, "
                f"less than {PLATEAU_DROP:.0%} lower)"
            )
    return None


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \|")


def _attempts(out_file: Path) -> List[Tuple[List[datetime], List[int]]]:
    """Each attempt of a run's log (``runner.run_logged`` starts each with a ``$ command`` line; an interrupted run
    resumes in a new attempt) as fairseq's timestamps and the updates it validated at; attempts without a stamp
    left out."""
    attempts: List[Tuple[List[datetime], List[str]]] = [([], [])]
    for line in Path(out_file).read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("$"):
            attempts.append(([], []))
        elif match := _STAMP.match(line):
            attempts[-1][0].append(datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
            attempts[-1][1].append(line)
    return [(stamps, [u for u, _ in parse_log("\n".join(lines)).valid]) for stamps, lines in attempts if stamps]


def training_seconds(out_file: Path) -> float:
    """Wall time fairseq-train ran, summed over attempts, from fairseq's timestamps."""
    return round(sum((stamps[-1] - stamps[0]).total_seconds() for stamps, _ in _attempts(out_file)), 1)


def seconds_per_update(out_file: Path) -> Optional[float]:
    """The median over the attempts that validated of the attempt's wall time per update trained (from the update
    the run had validated at before it to its own last validation; loading, validating and saving included): a run's
    pace, which a pause (SIGSTOP) or a killed attempt inside ``training_seconds`` does not move. None before the
    first validation."""
    rates, done = [], 0
    for stamps, validated in _attempts(out_file):
        if validated and validated[-1] > done:
            rates.append((stamps[-1] - stamps[0]).total_seconds() / (validated[-1] - done))
            done = validated[-1]
    return round(statistics.median(rates), 3) if rates else None


def log_span(out_file: Path):
    """(first, last) fairseq timestamp of a run's log, over all its attempts."""
    attempts = _attempts(out_file)
    return (attempts[0][0][0], attempts[-1][0][-1]) if attempts else (None, None)


def outcome(out_file: Path) -> Dict[str, object]:
    """What a result records from a training's log: the "fails" verdict, final losses, curves and training time."""
    log = read_log(out_file)
    return dict(
        fails=divergence(log),
        final_valid_loss=log.valid[-1][1] if log.valid else None,
        final_train_loss=log.train[-1][1] if log.train else None,
        train_curve=log.train,
        valid_curve=log.valid,
        train_seconds=training_seconds(out_file),
        seconds_per_update=seconds_per_update(out_file),
    )
