"""The paper-table study's envelope: each planned group's runs, their budget and measured pace, the hours they take two
at a time, and the running total in the plan's order (the cut order is its reverse). Paces from pace.json (made by
`analysis.pace`, the command in it); a scheme not measured at a depth takes the pace of the run named in ASSUMED.

    .venv/bin/python results/paper-table/envelope.py > results/paper-table/envelope.md
"""

import json
from pathlib import Path

from fairseq_residual_tools.markdown import table
from fairseq_residual_tools.provenance import describe, provenance

HERE = Path(__file__).parent
#: the plan, in the order it trains: (depth, seed, schemes); E18D18 in the paper's order of interest, the schemes a
#: cut keeps to the last first
GROUPS = [
    (6, 1, ["deepnet", "admin", "tfixup", "b2t", "dlcl"]),
    (18, 1, ["post", "pre", "residual", "deepnet", "b2t", "tfixup", "admin", "dlcl"]),
    (6, 2, ["deepnet", "admin", "tfixup", "b2t", "dlcl"]),
    (12, 1, ["deepnet", "admin", "tfixup"]),
]
#: updates a run trains at each depth: E6D6 and E12D12 where the first study's slowest run with warmup ended
#: (ResiDual, 8,750 and 10,000); E18D18's is fixed by its pilot: the range shows what it would cost
BUDGETS = {6: [8750], 12: [10000], 18: [8000, 12000]}
#: the issue's envelope (hours of this machine, two runs at a time) and what a cut removes first: whole groups, then
#: E18D18's schemes from the last of the paper's order of interest
ENVELOPE_H = 30.0
CUT_GROUPS = ["E12D12 seed 1", "E6D6 seed 2"]
#: Post-LN E6D6 trained anew to E6D6's budget (the first study's run ended short of it, its checkpoints lost): one run
#: beside the five baselines, at Pre-LN's pace
EXTENSIONS = [("post", 6)]
#: schemes not measured at a depth, and the run whose pace they take (same sub-layers, no extra stream or history)
ASSUMED = {
    "post": "pre",
    "deepnet": "pre",
    "b2t": "pre",
    "tfixup": "pre",
}


def pace_of(scheme: str, depth: int, paces: dict) -> tuple:
    name = f"{scheme}-e{depth}d{depth}-warmup-seed1"
    if name in paces:
        return paces[name], "measured"
    stand_in = f"{ASSUMED.get(scheme, 'pre')}-e{depth}d{depth}-warmup-seed1"
    if stand_in in paces:
        return paces[stand_in], f"as {stand_in.split('-e')[0]}"
    # a depth not measured: from the nearest measured depths of the same scheme's stand-in, linear in the layers
    measured = {int(n.split("-e")[1].split("d")[0]): s for n, s in paces.items() if n.startswith("pre-e")}
    low, high = min(measured), max(measured)
    slope = (measured[high] - measured[low]) / (high - low)
    return measured[low] + slope * (depth - low), f"pre, interpolated from E{low}D{low} and E{high}D{high}"


def main() -> None:
    record = json.loads((HERE / "pace.json").read_text())
    paces = record["seconds_per_update"]
    rows, totals = [], {}
    for depth, seed, schemes in GROUPS:
        for budget in BUDGETS[depth]:
            seconds = [pace_of(s, depth, paces) for s in schemes]
            hours = sum(p * budget for p, _ in seconds) / 3600
            key = f"E{depth}D{depth} seed {seed}"
            totals[key] = totals.get(key, []) + [hours / 2]
            how = "; ".join(f"{s} {p:.2f} ({w})" for s, (p, w) in zip(schemes, seconds))
            rows.append([key, len(schemes), f"{budget:,}", how, f"{hours:.1f}", f"{hours / 2:.1f}"])
    low = sum(min(v) for v in totals.values())
    high = sum(max(v) for v in totals.values())
    print(f"Made by `.venv/bin/python results/paper-table/envelope.py` from [pace.json](pace.json) ({record['command']}).\n")
    headers = ["group", "runs", "updates each", "s / update, side by side", "hours of one core", "hours two at a time"]
    print(table(headers, rows))
    print(f"\nThe whole plan, two at a time: {low:.1f} to {high:.1f} hours (E18D18's budget from 8,000 to 12,000).")
    extension = sum(pace_of(s, d, paces)[0] * BUDGETS[d][0] for s, d in EXTENSIONS) / 3600 / 2
    print(f"\nThe cut, to fit the issue's {ENVELOPE_H:.0f} hours (Post-LN E6D6 trained anew, {extension:.1f} h, kept):\n")
    for i, budget in enumerate(BUDGETS[18]):
        kept = {k: v[min(i, len(v) - 1)] for k, v in totals.items()}
        total, cut = sum(kept.values()) + extension, []
        for group in CUT_GROUPS:
            if total > ENVELOPE_H:
                hours = kept.pop(group)
                total -= hours
                cut.append(f"{group} ({hours:.1f} h)")
        e18 = next(schemes for depth, _, schemes in GROUPS if depth == 18)
        for scheme in reversed(e18):
            if total > ENVELOPE_H:
                hours = pace_of(scheme, 18, paces)[0] * budget / 3600 / 2
                total -= hours
                cut.append(f"E18D18 {scheme} ({hours:.1f} h)")
        print(f"- E18D18 at {budget:,} updates: cut {', '.join(cut) or 'nothing'}; {total:.1f} hours left.")
    print(f"\n{describe(provenance())}")


if __name__ == "__main__":
    main()
