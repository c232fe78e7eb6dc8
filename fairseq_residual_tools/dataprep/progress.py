"""Progress display for long data-preparation stages: tqdm on stderr with this project's intervals.

On a terminal the bar is redrawn at most twice a second; in a log file (CI) at most every 30
seconds, so logs stay short. ``--quiet`` turns it off.
"""

import sys

from tqdm import tqdm


class Progress(tqdm):
    """``Progress(desc, total, unit, quiet, start)``: a tqdm bar; ``unit="B"`` counts bytes in KiB/MiB."""

    def __init__(self, desc: str, total=None, unit="lines", quiet=False, start=0):
        super().__init__(
            desc=desc,
            total=total,
            unit=unit if unit == "B" else f" {unit}",
            initial=start,
            disable=quiet,
            file=sys.stderr,
            mininterval=0.5 if sys.stderr.isatty() else 30.0,
            unit_scale=unit == "B",
            unit_divisor=1024,
            dynamic_ncols=True,
        )
        self.desc = desc  # tqdm leaves it unset when disabled; a restarted download reuses it
