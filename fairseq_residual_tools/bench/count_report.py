"""Counting every variant at the bench's sizes (``counts``), each scheme's extra work against its formula
(``formulas``), and the record: ``counts.json`` and ``counts.md``."""

import gc
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from ..files import write_json, write_text
from ..markdown import table
from ..provenance import describe, git_state, provenance, versions
from .formulas import FORMULAS, Shapes, difference, overhead_rows
from .variants import REFERENCE, Size, variants

Log = Callable[[str], None]
MB = 2**20
#: each variant's counts as soon as they are made, until counts.json is written
PARTIAL = "counts.partial.json"


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _code(record: Dict) -> Dict:
    """What the counts depend on: the code (commit, uncommitted changes) and the package versions."""
    return {"git": record["git"], "versions": record["versions"]}


def _planned(sizes: Sequence[Size]) -> Dict[str, List[str]]:
    return {size.name: [v.name for v in variants(size.schemes)] for size in sizes}


def finished(out_dir: Path, command: str, sizes: Sequence[Size]) -> Optional[str]:
    """The commit whose ``counts.json`` in ``out_dir`` already holds ``command``'s counts on this very code
    (a clean checkout, the same versions), or None."""
    path = out_dir / "counts.json"
    if not path.exists():
        return None
    done, git = json.loads(path.read_text()), git_state()
    same = done["command"] == command and _code(done) == {"git": git, "versions": versions()} and git["dirty"] is False
    planned = {size["size"]["name"]: list(size["variants"]) for size in done["sizes"]}
    return str(git["commit"]) if same and planned == _planned(sizes) else None


def run(sizes: Sequence[Size], command: str, out_dir: Path, log: Log = _stderr) -> Dict:
    """The counts record: every variant of each size (``size.schemes``; None: every registered scheme) counted,
    and each scheme's measured extra work beside its formula.

    Resumable: each variant's counts are kept in ``out_dir``/``PARTIAL`` as soon as they are made, and a run on
    the same code and versions takes them from there (``write`` removes the file)."""
    from .counts import step_counts

    here = provenance()
    partial = out_dir / PARTIAL
    kept: Dict = json.loads(partial.read_text()) if partial.exists() else {}
    if kept and _code(kept) != _code(here):
        log(f"{partial}: counted on other code or versions; counting again")
        kept = {}
    counted: Dict[str, Dict] = kept.get("counted", {})
    seconds: Dict[str, float] = kept.get("seconds", {})
    for size in sizes:
        chosen = variants(size.schemes)
        for i, variant in enumerate(chosen, 1):
            key = f"{size.name}/{variant.name}"
            if key in counted:
                log(f"[{size.name}] {variant.name} ({i}/{len(chosen)}): counted before, kept from {partial}")
                continue
            log(f"[{size.name}] counting {variant.name} ({i}/{len(chosen)}): a training step and a generation")
            start = time.time()
            counted[key] = step_counts(size, variant)
            seconds[key] = time.time() - start
            gc.collect()  # the variant's model and Adam state, before the next one is built
            write_json(partial, {**_code(here), "counted": counted, "seconds": seconds})
    record: Dict = {"command": command, **here, "seconds": sum(seconds.values()), "sizes": []}
    for size in sizes:
        chosen = variants(size.schemes)
        found = {v.name: counted[f"{size.name}/{v.name}"] for v in chosen}
        record["sizes"].append(
            {
                "size": asdict(size),
                "shapes": asdict(Shapes.of(size)),
                "variants": {v.name: {"label": v.label, **found[v.name]} for v in chosen},
                "overhead": overhead_rows(size, found),
            }
        )
    return record


def _mb(nbytes: float) -> str:
    return f"{nbytes / MB:.3f}"


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:+.3f} %"


def _variant_rows(size: Dict) -> List[List[str]]:
    rows = []
    for name, v in size["variants"].items():
        train, gen = v["train"], v["generate"]
        rows.append(
            [name, f"{train['ops']}", f"{train['flops'] / 1e9:.3f}", _mb(train["bytes"])]
            + [f"{train['saved_tensors']}", _mb(train["saved_bytes"])]
            + [f"{gen['ops']}", f"{gen['flops'] / 1e9:.3f}", _mb(gen["bytes"])]
        )
    return rows


def _minus(row: Dict) -> str:
    """Measured minus formula: ``0`` when nothing is left, else the counts and kinds left over."""
    m = row["minus"]
    if not (m["ops"] or m["bytes"] or m["flops"] or m["by_kind"]):
        return "0"
    kinds = ", ".join(f"{k} {c['ops']:+d} ({c['bytes']:+d} B)" for k, c in m["by_kind"].items())
    return f"{m['ops']:+d} ops, {m['bytes']:+d} B, {m['flops']:+d} FLOPs: {kinds}"


def _overhead_rows(size: Dict) -> List[List[str]]:
    rows = []
    for row in size["overhead"]:
        base = size["variants"][row["base"]][row["phase"]]
        measured, expected = row["measured"], row["formula"]
        rows.append(
            [row["scheme"], row["base"], row["phase"], f"{measured['ops']:+d}", f"{expected['ops']:+d}"]
            + [_share(measured["ops"], base["ops"]), f"{measured['bytes']:+d}", f"{expected['bytes']:+d}"]
            + [_share(measured["bytes"], base["bytes"]), _minus(row)]
        )
    return rows


def reference_rows(record: Dict, scheme: str = "residual") -> List[List[str]]:
    """``scheme`` against stock Pre-LN (issue 19's reference) at every size: its extra operations, FLOPs and
    bytes as shares of stock Pre-LN's step (the wall-clock ratios are in bench.md)."""
    rows = []
    for size in record["sizes"]:
        found = size["variants"]
        if scheme not in found or REFERENCE not in found:
            continue
        for phase in ("train", "generate"):
            ours, ref = found[scheme][phase], found[REFERENCE][phase]
            extra = difference(ours, ref)
            rows.append(
                [
                    size["size"]["name"],
                    phase,
                    f"{ref['ops']}",
                    f"{extra['ops']:+d} ({_share(extra['ops'], ref['ops'])})",
                ]
                + [f"{extra['flops']:+d}", f"{_mb(extra['bytes'])} MB ({_share(extra['bytes'], ref['bytes'])})"]
            )
    return rows


def markdown(record: Dict) -> str:
    lines = [
        "# Counted work: aten operations, FLOPs and bytes of one training step and one generation",
        "",
        f"- command: `{record['command']}`; {record['seconds']:.0f} s",
        f"- {describe(record)}",
        "- what is counted (`fairseq_residual_tools/bench/counts.py`): every aten operation dispatched in a training "
        "step (forward, label-smoothed loss, backward, Adam) and in a beam-5 generation of the bench's batches, "
        "fp32 on the CPU, after one uncounted step and generation; views, allocations and profiler markers are free "
        "(not in `ops`, no bytes); bytes = the operations' input and output tensors; FLOPs: torch.utils.flop_counter "
        "(matrix products and attention). The counts depend on shapes only: every run gives the same numbers",
        '- formulas: `fairseq_residual_tools/bench/formulas.py` and docs/performance.md, "Counted work"',
        "",
    ]
    for size in record["sizes"]:
        s, x = size["size"], size["shapes"]
        lines += [
            f"## {s['name']}: `{s['arch']}`, E{s['layers']}D{s['layers']}, vocabulary {s['vocab']}",
            "",
            f"B = {x['B']} sentences, S = {x['S']}, T = {x['T']}, d = {x['d']}, FFN F = {x['F']}, H = {x['H']} heads, "
            f"N = {x['N']}, M = {x['M']}; "
            f"generation G = {x['G']} sentences, beam K = {x['K']}, L = {x['L']} tokens (L + 1 decoder steps).",
            "",
            table(
                ["variant", "train ops", "train GFLOP", "train MB", "saved tensors", "saved MB"]
                + ["generate ops", "generate GFLOP", "generate MB"],
                _variant_rows(size),
            ),
            "",
            "Each scheme against the variant it is built from: the extra work measured, the formula's, and measured "
            "minus formula (0: nothing beyond the formula).",
            "",
            table(
                ["scheme", "over", "phase", "ops", "formula ops", "ops, share", "bytes", "formula bytes"]
                + ["bytes, share", "measured − formula"],
                _overhead_rows(size),
            ),
            "",
        ]
    lines += [
        "## ResiDual against stock Pre-LN (issue 19's reference)",
        "",
        table(["size", "phase", "stock Pre-LN ops", "extra ops", "extra FLOPs", "extra bytes"], reference_rows(record)),
        "",
    ]
    return "\n".join(lines)


def write(record: Dict, out_dir: Path) -> None:
    """counts.json and counts.md; the partial counts of ``run`` are then removed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "counts.json", {**record, "formulas": {s: base for s, (base, _, _) in FORMULAS.items()}})
    write_text(out_dir / "counts.md", markdown(record))
    (out_dir / PARTIAL).unlink(missing_ok=True)
