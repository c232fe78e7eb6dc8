"""Hyper-Connections' memory for n streams: one training step of ``hc`` at n = 1, 2, 4 (``--hc-streams``) beside
the plugin's Pre-LN at the bench's sizes, measured as the bench measures memory (``memory.memory_probe``, each
variant in a fresh process), and what of it grows with n, as formulas (symbols as in ``formulas``; per stack run
of r rows of width d with s sub-layers):

* saved for backward, over Pre-LN, per sub-layer: the n streams H (read by the dynamic part's norm and by both
  products A_m^T H, A_r^T H), norm(H) (read by the two projections), the sub-layer's output (read by B^T out) and
  the per-token coefficients (the norm's mean and 1/std, tanh of H_bar [W_m | W_r] and of H_bar W_beta, A_m, A_r,
  B): 4 (2 r n d + r d + r n (2n + 6)) bytes, linear in n but for A_r's r n^2;
* parameters, buffers and Adam's state, over Pre-LN, per sub-layer: A_m, A_r, B, the norm's gain and bias,
  [W_m | W_r], W_beta, s_alpha, s_beta and their two Adam moments, 3 x 4 (n^2 + 2n + d (n + 4) + 2) bytes; Adam's
  step of each of the 9 tensors, 4 x 9; the buffer of A_m's start e_k, 4 n.

The step's allocation peak has no formula here: it is measured, its rise over Pre-LN put beside the saved bytes'.
"""

import functools
import sys
from dataclasses import asdict
from typing import Callable, Dict, List, Sequence

from ..files import write_json, write_text
from ..markdown import table
from ..provenance import describe, provenance
from .formulas import FLOAT_BYTES, Shapes, stack_calls
from .variants import Size, Variant

#: the stream counts measured; 4 is ``--hc-streams``' default
STREAMS = (1, 2, 4)
BASE = "pre"
MB = 2**20
Log = Callable[[str], None]


def memory_variants(streams: Sequence[int] = STREAMS) -> List[Variant]:
    """The plugin's Pre-LN, then ``hc`` at each of ``streams``."""
    hc = [
        Variant(f"hc-n{n}", f"residual_transformer --residual-scheme hc --hc-streams {n}", "hc", streams=n)
        for n in streams
    ]
    return [Variant(BASE, f"residual_transformer --residual-scheme {BASE}", BASE), *hc]


def saved_formula(x: Shapes, n: int) -> int:
    """Bytes saved for backward by ``hc`` with ``n`` streams beyond Pre-LN in a training step (module docstring)."""
    total = 0
    for call, _ in stack_calls(x, "train"):
        r, d = call.rows, call.d
        total += call.sublayers * (2 * r * n * d + r * d + r * n * (2 * n + 6))
    return FLOAT_BYTES * total


def persistent_formula(x: Shapes, n: int) -> int:
    """Bytes of parameters, buffers and Adam's state of ``hc`` with ``n`` streams beyond Pre-LN (module docstring)."""
    sublayers, d = 2 * x.N + 3 * x.M, x.d
    return FLOAT_BYTES * sublayers * (3 * (n * n + 2 * n + d * (n + 4) + 2) + 9 + n)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def rows(size: Size, memory: Dict[str, Dict]) -> List[Dict]:
    """Per stream count: the measured rises over Pre-LN (bytes) beside the formulas'."""
    x, base = Shapes.of(size), memory[BASE]
    found = []
    for name, figures in memory.items():
        if name == BASE:
            continue
        n = int(name.rsplit("-n", 1)[1])
        rise = {key: round((figures[f"{key}_mb"] - base[f"{key}_mb"]) * MB) for key in ("saved", "persistent")}
        expected = {"saved": saved_formula(x, n), "persistent": persistent_formula(x, n)}
        found.append(
            dict(
                n=n,
                measured=rise,
                formula=expected,
                minus={key: rise[key] - expected[key] for key in rise},
                step_peak_rise=round((figures["step_peak_mb"] - base["step_peak_mb"]) * MB),
                peak_rise=round((figures["peak_mb"] - base["peak_mb"]) * MB),
            )
        )
    return found


def run(
    sizes: Sequence[Size],
    command: str,
    threads: int,
    fresh_process: bool = True,
    malloc=None,
    device: str = "cpu",
    log: Log = _stderr,
) -> Dict:
    """The record: every size's memory of ``memory_variants`` and its ``rows``."""
    from .isolation import in_fresh_process
    from .memory import memory_probe

    probe = functools.partial(in_fresh_process, "memory_probe", threads, malloc) if fresh_process else memory_probe
    record: Dict = {"command": command, **provenance(), "threads": threads, "malloc": malloc, "device": device}
    record["sizes"] = []
    for size in sizes:
        memory = {}
        for variant in memory_variants():
            log(f"[{size.name}] memory of {variant.name}: one training step")
            memory[variant.name] = probe(size=size, variant=variant, device=device)
        entry = {"size": asdict(size), "shapes": asdict(Shapes.of(size)), "memory": memory}
        record["sizes"].append({**entry, "rows": rows(size, memory)})
    return record


def _growth(x: Shapes) -> str:
    """saved(n) - saved(Pre-LN) = a n + b n^2 + c at this size, in bytes."""
    linear = quadratic = constant = 0
    for call, _ in stack_calls(x, "train"):
        r, d, s = call.rows, call.d, call.sublayers
        linear, quadratic, constant = linear + s * (2 * r * d + 6 * r), quadratic + s * 2 * r, constant + s * r * d
    a, b, c = (FLOAT_BYTES * k for k in (linear, quadratic, constant))
    return f"saved(n) − saved(Pre-LN) = {a:,} n + {b:,} n² + {c:,} bytes"


def _row(name: str, figures: Dict, row: Dict) -> List[str]:
    measured, expected, minus = row["measured"], row["formula"], row["minus"]
    return [
        name,
        f"{figures['saved_mb']:.3f}",
        f"{measured['saved']:+,}",
        f"{expected['saved']:+,}",
        f"{minus['saved']:+,}",
        f"{measured['persistent']:+,}",
        f"{minus['persistent']:+,}",
        f"{figures['step_peak_mb']:.3f}",
        f"{figures['peak_mb']:.3f}",
        f"{row['peak_rise'] / MB:+.3f}",
        f"{row['step_peak_rise'] / measured['saved']:.3f}",
    ]


def markdown(record: Dict) -> str:
    lines = [
        "# Hyper-Connections' memory for n streams: one training step beside Pre-LN",
        "",
        f"- command: `{record['command']}`; {record['threads']} thread(s), malloc {record['malloc'] or 'inherited'}, "
        f"{record['device']}",
        f"- {describe(record)}",
        "- what is measured (`fairseq_residual_tools/bench/memory.py`, as `make bench` does, each variant in a fresh "
        "process after one step): saved = the distinct storages autograd keeps for backward (parameters excluded); "
        "persistent = parameters, buffers and Adam's state; step peak = the peak of the bytes the step allocated and "
        "had not freed; peak = persistent + step peak",
        "- formulas: `fairseq_residual_tools/bench/stream_memory.py` (docstring) and docs/performance.md",
        "",
    ]
    header = ["variant", "saved MB", "saved − Pre-LN, B", "formula, B", "measured − formula, B"]
    header += ["persistent − Pre-LN, B", "measured − formula, B", "step peak MB", "peak MB", "peak − Pre-LN, MB"]
    header += ["step peak rise / saved rise"]
    for size in record["sizes"]:
        s, memory = size["size"], size["memory"]
        base = memory[BASE]
        body = [[BASE, f"{base['saved_mb']:.3f}", *[""] * 5, f"{base['step_peak_mb']:.3f}", f"{base['peak_mb']:.3f}"]]
        body[0] += ["", ""]
        body += [_row(f"hc-n{row['n']}", memory[f"hc-n{row['n']}"], row) for row in size["rows"]]
        lines += [f"## {s['name']}: `{s['arch']}`, E{s['layers']}D{s['layers']}", "", table(header, body), ""]
        lines += [f"{_growth(Shapes(**size['shapes']))}.", ""]
    return "\n".join(lines)


def write(record: Dict, out_dir) -> None:
    write_json(out_dir / "hc-memory.json", record)
    write_text(out_dir / "hc-memory.md", markdown(record))
