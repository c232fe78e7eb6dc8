"""E18D18's budget from its pilot, and how far the same projection is from where the first study's runs plateaued.

For each record given (a study's runs/*.json), the fit a + b * u^-c of ``results/bible-study/projection.py`` to its
validation curve from update FROM to update PILOT only (what a pilot to PILOT sees), and the first update at which
the plateau rule (< 1 % over the last quarter) holds on the fit: the projected plateau. Where the record trained on
to its plateau (the first study's runs), its real plateau stands beside it: the projection's error, measured.
The budget is the latest projected plateau of the PILOT records given with --budget-from, corrected by the worst
measured underestimate (the real plateau over the projected one) and rounded up to a validation.

    .venv/bin/python results/paper-table/budget.py --pilot 5000 \\
        --backtest results/bible-study/runs/*-warmup-seed?-*.json \\
        --budget-from results/paper-table/pilot-e18d18/runs/*.json > results/paper-table/budget.md
"""

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import curve_fit

from fairseq_residual_tools.markdown import table
from fairseq_residual_tools.provenance import ROOT, describe, provenance

sys.path.insert(0, str(ROOT / "results" / "bible-study"))
from projection import first_plateau_on, power_law  # noqa: E402 (the first study's fit, not a copy of it)

FROM = 1000  # the first study's fits start here (warmup over, the curve's fast fall past)
EVERY = 250  # a validation every 250 updates: budgets lie on them


def projected(record: dict, pilot: int):
    """The fit's parameters and the update where the rule first holds on it (None: not by 200,000)."""
    points = np.array([p for p in record["valid_curve"] if FROM <= p[0] <= pilot])
    if len(points) < 4:
        raise SystemExit(f"{record['name']}: fewer than 4 validations between {FROM} and {pilot}")
    params, _ = curve_fit(power_law, points[:, 0], points[:, 1], p0=[4, 100, 0.5], maxfev=20000)
    return params, first_plateau_on(params, pilot)


def real_plateau(record: dict):
    """Where the record's run plateaued by the rule (None: it stopped otherwise, e.g. at a budget or failed)."""
    if record.get("plateau_update") is not None:
        return record["plateau_update"]
    return record["end_update"] if record.get("stop") == "plateau" else None


def rows(paths, pilot: int):
    for path in paths:
        record = json.loads(Path(path).read_text())
        if record.get("fails"):
            yield record, None, None, None
            continue
        params, plateau = projected(record, pilot)
        yield record, params, plateau, real_plateau(record)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pilot", type=int, default=3000, help="the update the pilot trains to")
    p.add_argument("--backtest", nargs="*", default=[], help="records that trained on to their plateau")
    p.add_argument("--budget-from", nargs="*", default=[], help="the pilot's records")
    p.add_argument("--compare-pilots", type=int, nargs="*", default=[], help="the backtest's range at these lengths")
    args = p.parse_args(argv)
    print(
        f"Made by `.venv/bin/python results/paper-table/budget.py {' '.join(sys.argv[1:] if argv is None else argv)}`"
    )
    print("(an extrapolation checked against the runs that trained on; see the script).\n")
    headers = [
        "run",
        "fit a, b, c (to update %d)" % args.pilot,
        "projected plateau",
        "real plateau",
        "real / projected",
    ]
    ratios, shown = [], []
    for record, params, plateau, real in rows(args.backtest, args.pilot):
        if params is None:
            shown.append([record["name"], "failed: not fitted", "-", "-", "-"])
            continue
        ratio = real / plateau if real and plateau else None
        ratios += [ratio] if ratio else []
        fit = ", ".join(f"{v:.3g}" for v in params)
        shown.append([record["name"], fit, plateau or "not by 200,000", real or "-", f"{ratio:.2f}" if ratio else "-"])
    if shown:
        print(f"**The projection against the first study's runs** (fitted to update {args.pilot} only):\n")
        print(table(headers, shown))
        print(f"\nReal over projected plateau: {', '.join(f'{r:.2f}' for r in sorted(ratios))}.\n")
    if args.compare_pilots:
        lengths = []
        for length in args.compare_pilots:
            found = [real / u for _, q, u, real in rows(args.backtest, length) if q is not None and u and real]
            lengths.append([f"{length:,}", len(found), f"{min(found):.2f}", f"{max(found):.2f}"])
        print("**The same projection from pilots of other lengths** (real over projected plateau):\n")
        print(table(["pilot to update", "runs", "lowest", "highest"], lengths) + "\n")
    correction = max([1.0, *ratios])
    pilots = list(rows(args.budget_from, args.pilot))
    if pilots:
        print(f"**The pilot** (to update {args.pilot}):\n")
        print(
            table(
                headers[:3],
                [[r["name"], ", ".join(f"{v:.3g}" for v in q), u] for r, q, u, _ in pilots if q is not None],
            )
        )
        latest = max((u for _, q, u, _ in pilots if q is not None and u), default=None)
        if latest is None:
            print("\nNo pilot run's fit reaches the rule by 200,000 updates: no budget from this pilot.")
        else:
            budget = math.ceil(latest * correction / EVERY) * EVERY
            print(
                f"\nBudget: the latest projected plateau, {latest:,}, times the worst underestimate above, "
                f"{correction:.2f}, rounded up to a validation: **{budget:,} updates**."
            )
    print(f"\n{describe(provenance())}")


if __name__ == "__main__":
    main()
