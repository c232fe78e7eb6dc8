"""One console line per training every so many updates: scheme, depth, update, loss, ETA.

It reads fairseq-train's JSON ``train_inner`` lines as ``run_logged`` passes them on. The ETA
is the rate of this process so far (a resumed training starts counting again).
"""

import time
from typing import Optional

from ..training_log import json_record


def format_seconds(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class TrainingProgress:
    """``on_line`` callback: prints ``[label] update U/N  loss L  ETA T`` at most every ``every`` updates."""

    def __init__(self, label: str, max_update: int, every: int):
        self.label, self.max_update, self.every = label, max_update, max(1, every)
        self.start: Optional[tuple] = None  # (time, update) of the first logged update
        self.next_print = 0

    def __call__(self, line: str):
        record = json_record(line)
        if record is None or "num_updates" not in record or "loss" not in record:
            return
        try:
            update, loss = int(record["num_updates"]), float(record["loss"])
        except ValueError:
            return
        now = time.monotonic()
        if self.start is None:
            self.start = (now, update)
            self.next_print = update
        if update < self.next_print and update < self.max_update:
            return
        self.next_print = update + self.every
        t0, u0 = self.start
        eta = "?" if update == u0 else format_seconds((self.max_update - update) * (now - t0) / (update - u0))
        print(f"[{self.label}] update {update}/{self.max_update}  loss {loss:.2f}  ETA {eta}", flush=True)
