"""Progress display for long data-preparation stages: tqdm on stderr with this project's intervals.

On a terminal the bar is redrawn at most twice a second; in a log file (CI) at most every 30
seconds, so logs stay short. ``--quiet`` turns it off. tqdm is imported on the first bar, not
with this module: its import alone costs about 0.1 s of CPU, which ``--help`` does not need.
"""

import sys


def progress_bar(desc: str, total=None, unit="lines", quiet=False, start=0):
    """A tqdm bar counting ``unit`` from ``start``; ``unit="B"`` counts bytes in KiB/MiB."""
    from tqdm import tqdm

    return tqdm(
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
