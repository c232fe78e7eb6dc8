"""Where each run's plateau is projected, and how long an update takes: the figures of summary.md's envelope and of
dropout-0.3/summary.md. For every training log under WORK/runs (default work/bible-study): the best validation loss's
fall over the last quarter, a fit a + b * u^-c (scipy) to the curve from update FROM on and the first update at which
the plateau rule (< 1 % over the last quarter) holds on the fit, and the run's seconds per update (its median attempt,
``training_log.seconds_per_update``). An extrapolation, not a measurement of the plateau.

    .venv/bin/python results/bible-study/projection.py [WORK] > results/bible-study/projection.md
"""

import sys
from pathlib import Path

import numpy as np
from scipy.optimize import curve_fit

from fairseq_residual_tools.analysis.plateau import best_until
from fairseq_residual_tools.provenance import describe, provenance
from fairseq_residual_tools.training_log import read_log, seconds_per_update

FLAGS = ("dropout", "lr")  # the recipe's settings that differ between the runs measured


def power_law(u, a, b, c):
    return a + b * u ** (-c)


def first_plateau_on(params, start: int, until: int = 200_000):
    fall = lambda u: (power_law(0.75 * u, *params) - power_law(u, *params)) / power_law(0.75 * u, *params)  # noqa: E731
    return next((u for u in range(start, until + 1, 250) if fall(u) < 0.01), None)


def main(work: Path) -> None:
    print(f"Made by `.venv/bin/python results/bible-study/projection.py {work}` (an extrapolation: see the script).\n")
    print(
        "| run | dropout | peak lr | at update | last quarter | fit from | fit a, b, c | rule holds on the fit at "
        "| s/update |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for out in sorted(work.glob("runs/*/train.out")):
        curve = read_log(out).valid
        if len(curve) < 8:
            continue
        command = out.read_text().split("\n", 1)[0]
        dropout, lr = (command.split(f"--{flag} ")[1].split()[0] if f"--{flag} " in command else "?" for flag in FLAGS)
        end = curve[-1][0]
        before, now = best_until(curve, 0.75 * end), best_until(curve, end)
        start = 1500 if dropout == "0.3" else 1000
        points = np.array([p for p in curve if p[0] >= start])
        params, _ = curve_fit(power_law, points[:, 0], points[:, 1], p0=[4, 100, 0.5], maxfev=20000)
        plateau = first_plateau_on(params, end)
        per_update = seconds_per_update(out)
        fit = ", ".join(f"{p:.3g}" for p in params)
        print(
            f"| {out.parent.name} | {dropout} | {lr} | {end} | {(before - now) / before:.1%} | {start} | {fit} | "
            f"{plateau or 'not by 200,000'} | {per_update:.2f} |"
        )
    print(f"\n{describe(provenance())}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "work/bible-study"))
