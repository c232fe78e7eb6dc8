"""The benchmark's record as ``bench.json`` and ``bench.md``, and the targets the ratios are checked on."""

import statistics
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from ..files import write_json, write_text
from ..markdown import table
from ..provenance import describe
from .measure import ratio_summary
from .steps import BEAM

#: ResiDual against stock Pre-LN (medians), and the plugin's Post-/Pre-LN against the stock ones:
#: ResiDual's extra stream may cost at most 1 % of speed and no peak training memory (issue 19), and
#: the plugin's own Post-LN and Pre-LN run the same layers as fairseq's, within 2 %; a ratio is judged at
#: the three decimals the report shows (the residual_transformer's 256-byte scheme tag buffer alone puts
#: its peak at 1.0000001 x stock's)
TARGETS = {"residual_train": 0.99, "residual_memory": 1.00, "residual_generate": 0.99, "plugin_vs_stock": 0.02}


def _size_checks(size: Dict) -> Iterator[Tuple[str, float, str, bool]]:
    """(quantity, measured median, target, whether it holds) at one size."""
    train, gen = size["train"], size["generate"]
    if "residual" in train:
        speed, limit = train["residual"]["ratio_to_reference"]["median"], TARGETS["residual_train"]
        yield "ResiDual training speed / stock Pre-LN", speed, f">= {limit}", round(speed, 3) >= limit
        peak, limit = size["memory"]["residual"]["peak_mb_ratio"], TARGETS["residual_memory"]
        yield "ResiDual peak training memory / stock Pre-LN", peak, f"<= {limit}", round(peak, 3) <= limit
        speed, limit = gen["residual"]["ratio_to_reference"]["median"], TARGETS["residual_generate"]
        yield "ResiDual generation speed / stock Pre-LN", speed, f">= {limit}", round(speed, 3) >= limit
    tolerance = TARGETS["plugin_vs_stock"]
    for ours in ("post", "pre"):
        for kind, timings in (("training", train), ("generation", gen)):
            if ours in timings:
                ratio = ratio_summary(timings[f"stock-{ours}"]["wall_s"], timings[ours]["wall_s"])["median"]
                what = f"plugin {ours} {kind} speed / stock {ours}"
                yield what, ratio, f"1 ± {tolerance}", round(abs(ratio - 1), 3) <= tolerance


def target_checks(record: Dict) -> List[Dict]:
    """Each target at each size: the measured median and whether it holds."""
    return [
        dict(size=size["size"]["name"], what=what, value=value, target=target, holds=bool(holds))
        for size in record["sizes"]
        for what, value, target, holds in _size_checks(size)
    ]


def _ratio(r: Dict[str, float]) -> str:
    return f"{r['median']:.3f} ({r['min']:.3f}–{r['max']:.3f})"


def _number(x: Optional[float], spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def _load(load: List[float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load)


def _speed(timings: Dict, unit: str, spec: str) -> List[str]:
    """The median of ``unit`` per second, and the wall and user-CPU ratios to the reference."""
    ratios = timings["ratio_to_reference"], timings["user_cpu_ratio_to_reference"]
    return [format(statistics.median(timings[unit]), spec), *map(_ratio, ratios)]


def _setting(record: Dict) -> str:
    train, gen, layouts = record["rounds"], record["generation_rounds"], record["layouts"]
    text = f"warm-up {record['warmup']}, interleaved rounds: {train} of training, {gen} of generation"
    if layouts > 1:
        text += (
            f", in each of {layouts} layouts (a fresh process per layout, the variants built and run in rotated "
            f"order), {layouts * train} and {layouts * gen} rounds in all"
        )
    if record.get("gpu"):
        return f"{text}; on {record['gpu']}, tensors in PyTorch's caching allocator"
    env = record["sizes"][0]["malloc_environment"]  # the same in every size's processes
    allocator = ", ".join(f"{k}={v}" for k, v in env.items()) or "glibc's default settings"
    allocator += f" (`--malloc {record['malloc']}`)" if record["malloc"] else ""
    return f"{text}; memory allocator: {allocator}"


def markdown(record: Dict) -> str:
    labels = {name: label for size in record["sizes"] for name, label in size["variants"].items()}
    lines = [
        "# Benchmark: residual schemes vs fairseq's stock transformer",
        "",
        f"- command: `{record['command']}`, {record['threads']} torch threads",
        f"- {describe(record)}",
        f"- {_setting(record)}; {record['seconds']:.0f} s in all; load average (1, 5, 15 min) "
        f"before {_load(record['load_average_before'])}, after {_load(record['load_average_after'])}",
        f"- ratios are to `{record['reference']}`; speed: median (min–max) over the rounds, > 1 is faster "
        "(wall time; user CPU time beside it); memory: < 1 is smaller (definitions in "
        "`fairseq_residual_tools/bench/memory.py`)",
        "- variants: " + "; ".join(f"`{n}` = {label}" for n, label in labels.items()),
        "",
    ]
    for size in record["sizes"]:
        s = size["size"]
        speed_rows, memory_rows = [], []
        for name in size["variants"]:
            t, g, m = size["train"][name], size["generate"][name], size["memory"][name]
            faults = f"{statistics.median(t['minor_faults']):.0f}"
            speed_rows.append(
                [name, f"{size['parameters'][name] / 1e6:.1f}", *_speed(t, "tokens_per_s", ".0f"), faults]
                + _speed(g, "sentences_per_s", ".2f")
            )
            memory_rows.append(
                [name, f"{m['peak_mb']:.1f}", f"{m['peak_mb_ratio']:.3f}", _number(m["rss_rise_mb"], ".1f")]
                + [_number(m["rss_rise_mb_ratio"], ".3f"), f"{m['saved_mb']:.1f}", f"{m['saved_mb_ratio']:.3f}"]
            )
        lines += [
            f"## {s['name']}: `{s['arch']}`, E{s['layers']}D{s['layers']}, vocabulary {s['vocab']}",
            "",
            f"Training batch {s['batch']} sentences × {s['src_len']} source / {s['tgt_len']} target tokens; "
            f"generation {s['gen_batch']} sentences, beam {BEAM}, {s['gen_len']} tokens per hypothesis. "
            f"{size['seconds']:.0f} s; load average before {_load(size['load_average_before'])}, "
            f"after {_load(size['load_average_after'])}.",
            "",
            table(
                ["variant", "params (M)", "train tok/s", "train speed", "train speed, user CPU", "page faults / step"]
                + ["generate sent/s", "generate speed", "generate speed, user CPU"],
                speed_rows,
            ),
            "",
            table(
                ["variant", "peak MB", "peak", "RSS rise MB", "RSS rise", "saved for backward MB", "saved"],
                memory_rows,
            ),
            "",
        ]
    checks = [
        [c["size"], c["what"], f"{c['value']:.3f}", c["target"], "yes" if c["holds"] else "no"]
        for c in target_checks(record)
    ]
    lines += ["## Targets (medians)", "", table(["size", "quantity", "measured", "target", "holds"], checks), ""]
    return "\n".join(lines)


def write(record: Dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "bench.json", {**record, "targets": TARGETS})
    write_text(out_dir / "bench.md", markdown(record))
