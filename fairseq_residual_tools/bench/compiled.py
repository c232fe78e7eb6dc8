"""Training throughput side by side in one run: fairseq's stock Pre-LN eagerly, and each scheme eagerly and compiled
as ``--torch-compile`` compiles it, at each size and precision; the compile's first step, the updates it takes to pay
for itself, and peak memory.

    python -m fairseq_residual_tools.bench.compiled --device cpu --out results/bench/compiled
    python -m fairseq_residual_tools.bench.compiled --device cuda --precisions fp32 fp16 bf16 --out DIR

Each scheme is measured in a fresh process (``isolation``: its own dynamo and inductor caches) beside stock Pre-LN,
eager and compiled stepping in turn (``side_by_side``), so the ratios are taken in one process at one time. A
step is ``steps.TrainingStep``'s (forward, label-smoothed cross-entropy, backward, Adam) on a fixed synthetic batch;
tokens/s counts target tokens, as fairseq's ``wps``. fp16 and bf16 cast the model, as fairseq's ``--fp16`` and
``--bf16`` do (Adam here updates the cast weights: fairseq's master copy is left out of the step). Compiled and eager
draw different dropout masks, so their losses agree in trend, not digit for digit (``--dropout 0``: to rounding).
``--profile`` adds, for each scheme at each size, the ten kernels that took most time in eager and compiled steps.
"""

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional

from ..provenance import provenance
from .variants import CPU_STUDY, SIZES, TINY, Size, Variant

SIZE_CHOICES = {TINY.name: TINY, CPU_STUDY.name: CPU_STUDY, **SIZES}
DEFAULT_SIZES = {"cpu": ["tiny", "cpu-study", "iwslt-e6d6"], "cuda": ["iwslt-e6d6", "wmt-e6d6", "wmt-e18d18"]}
DEFAULT_SCHEMES = ["pre", "residual", "hc"]
PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _variant(scheme: Optional[str]) -> Variant:
    if scheme is None:
        return Variant("stock-pre", "fairseq transformer, Pre-LN", None, True)
    return Variant(scheme, f"residual_transformer --residual-scheme {scheme}", scheme)


def side_by_side(
    size: Size,
    scheme: str,
    device: str,
    precision: str,
    backend: str,
    mode: Optional[str],
    steps: int,
    warmup: int,
    dropout: Optional[float],
    profile: bool = False,
    warm_cache: bool = False,
    min_seconds: float = 20.0,
) -> Dict[str, Dict]:
    """fairseq's stock Pre-LN, ``scheme`` eager and ``scheme`` compiled (the eager model's weights) in this process:
    ``warmup`` steps each (the compile in the first), then timed steps in rounds, one step of each per round in
    rotated order (a drift of the machine's speed reaches the three alike), at least ``steps`` rounds and
    ``min_seconds`` of the slowest; then each one's peak memory and, with ``profile``, its costliest kernels."""
    import torch
    from fairseq.models.transformer import TransformerModelBase

    from fairseq_residual.compiled_training import check_compiler
    from fairseq_residual.compiled_training import compiled as compiled_forward

    from .memory import cuda_step_peak_bytes, step_allocation_peak_bytes
    from .steps import SyntheticTask, TrainingStep, synthetic_batch
    from .variants import build_variant

    if not warm_cache:  # the compile a first run pays: inductor's caches in a new folder
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
    if profile:
        from torch._inductor import config

        config.cpp.enable_kernel_profile = True  # inductor's C++ kernels by name in the profile
    task = SyntheticTask(size.vocab)
    sample = synthetic_batch(task, size.batch, size.src_len, size.tgt_len, device=device)
    dtype = getattr(torch, PRECISIONS[precision])
    runs: Dict[str, Callable[[], float]] = {}
    holders: Dict[str, TrainingStep] = {}
    for name in ("stock", "eager", "compiled"):
        model = build_variant(_variant(None if name == "stock" else scheme), size, task, device).to(dtype)
        if dropout is not None:
            for module in model.modules():
                if type(module).__name__ == "FairseqDropout":
                    module.p = dropout
        forward = None
        if name == "compiled":  # what --torch-compile runs in training (fairseq_residual/compiled_training.py)
            check_compiler(backend, next(model.parameters()).device)
            forward = functools.partial(compiled_forward(TransformerModelBase.forward, backend, mode), model)
        holders[name] = TrainingStep(model, sample, forward)
        runs[name] = functools.partial(_one_step, holders[name], device)

    seconds: Dict[str, List[float]] = {name: [] for name in runs}
    losses: Dict[str, List[float]] = {name: [] for name in runs}

    def timed(name: str) -> None:
        start = time.perf_counter()
        losses[name].append(runs[name]())
        seconds[name].append(time.perf_counter() - start)

    where = f"[bench.compiled] {size.name} {precision} {scheme}"
    for name in runs:
        for _ in range(warmup):
            timed(name)
        # progress, so a run stopped at a time limit shows how far it came (a cold GPU compile takes minutes)
        print(f"{where}: {name} warmed up, first step {seconds[name][0]:.1f} s", file=sys.stderr, flush=True)
    slowest = max(seconds[name][-1] for name in runs)
    rounds = max(steps, int(min_seconds / max(slowest, 1e-6)) + 1)
    print(f"{where}: {rounds} timed rounds", file=sys.stderr, flush=True)
    names = list(runs)
    for r in range(rounds):
        for name in names[r % 3 :] + names[: r % 3]:
            timed(name)
    measured = {}
    for name, step in holders.items():
        peak = cuda_step_peak_bytes(runs[name]) if device == "cuda" else step_allocation_peak_bytes(runs[name])
        measured[name] = {
            "first_step_s": seconds[name][0],
            "step_s": statistics.median(seconds[name][warmup:]),
            "timed_steps": len(seconds[name]) - warmup,
            "losses": losses[name][:warmup] + losses[name][-3:],
            "peak_mb": (step.persistent_bytes() + peak) / 2**20,
        }
        if profile and name != "stock":
            measured[name]["kernels"] = costliest_kernels(runs[name], device)
    return measured


def _one_step(step, device: str) -> float:
    import torch

    loss = step()
    if device == "cuda":
        torch.cuda.synchronize()
    return float(loss)


def costliest_kernels(step, device: str, count: int = 10, repeats: int = 3) -> List[Dict]:
    """The ``count`` operators and generated kernels of most self time over ``repeats`` steps, per step."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(repeats):
            step()
    attribute = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, attribute), reverse=True)
    total = sum(getattr(e, attribute) for e in events)
    return [
        {
            "name": e.key,
            "ms_per_step": getattr(e, attribute) / 1000 / repeats,
            "share": getattr(e, attribute) / total,
            "calls_per_step": e.count / repeats,
        }
        for e in events[:count]
    ]


def row_of(size: Size, precision: str, scheme: str, measured: Dict[str, Dict]) -> Dict:
    """One scheme's three measurements with tokens/s (target tokens, as fairseq's wps), the speed ratios, the
    compile's cost (the compiled first step beyond the eager one) and the updates that pay it back."""
    tokens = size.batch * size.tgt_len
    stock, eager, compiled = (measured[name] for name in ("stock", "eager", "compiled"))
    compile_s = compiled["first_step_s"] - eager["first_step_s"]
    saved = eager["step_s"] - compiled["step_s"]
    return {
        "size": size.name,
        "precision": precision,
        "scheme": scheme,
        **measured,
        "tokens_per_step": tokens,
        "tokens_per_s": {name: tokens / m["step_s"] for name, m in measured.items()},
        "eager_over_stock": stock["step_s"] / eager["step_s"],
        "compiled_over_stock": stock["step_s"] / compiled["step_s"],
        "compiled_over_eager": eager["step_s"] / compiled["step_s"],
        "compile_s": compile_s,
        "break_even_updates": compile_s / saved if saved > 0 else None,
    }


def markdown(record: Dict) -> str:
    lines = [
        "| size | precision | scheme | tokens/s: stock eager / eager / compiled | eager × stock | compiled × stock "
        "| compiled × eager | compile (s) | pays back after | peak MB: stock / eager / compiled |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in record["rows"]:
        speed = " / ".join(f"{r['tokens_per_s'][n]:.0f}" for n in ("stock", "eager", "compiled"))
        peaks = " / ".join(f"{r[n]['peak_mb']:.1f}" for n in ("stock", "eager", "compiled"))
        pays = "never" if r["break_even_updates"] is None else f"{r['break_even_updates']:.0f} updates"
        lines.append(
            f"| {r['size']} | {r['precision']} | {r['scheme']} | {speed} | {r['eager_over_stock']:.2f} "
            f"| {r['compiled_over_stock']:.2f} | {r['compiled_over_eager']:.2f} | {r['compile_s']:.0f} | {pays} "
            f"| {peaks} |"
        )
    return "\n".join(lines) + "\n"


def outcome(record: Dict) -> str:
    """Each scheme's row in one line (gpu_check's report)."""
    return "; ".join(
        f"{r['scheme']} at {r['size']} {r['precision']}: compiled {r['compiled_over_eager']:.2f}x its eager, "
        f"{r['compiled_over_stock']:.2f}x stock eager ({r['tokens_per_s']['compiled']:.0f} tokens/s; compile "
        f"{r['compile_s']:.0f} s)"
        for r in record["rows"]
    )


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_residual_tools.bench.compiled", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--sizes", nargs="+", choices=list(SIZE_CHOICES), help="default: by device")
    parser.add_argument("--schemes", nargs="+", default=DEFAULT_SCHEMES, help="residual_transformer schemes")
    parser.add_argument("--precisions", nargs="+", default=["fp32"], choices=list(PRECISIONS))
    parser.add_argument("--backend", default="inductor", help="torch.compile backend (default: inductor)")
    parser.add_argument("--mode", default=None, help="torch.compile mode (default: its default)")
    parser.add_argument("--steps", type=int, default=10, help="timed rounds at least (one step of each variant)")
    parser.add_argument("--min-seconds", type=float, default=20.0, help="and at least this long for the slowest")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (the compile among them)")
    parser.add_argument("--dropout", type=float, default=None, help="dropout of every layer (default: the preset's)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each measuring process (CPU)")
    parser.add_argument("--profile", action="store_true", help="add each variant's ten costliest kernels")
    parser.add_argument(
        "--warm-cache", action="store_true", help="compile with inductor's on-disk caches (default: a new one each)"
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for compiled.json and compiled.md")
    return parser.parse_args(argv)


def main(argv=None) -> Dict:
    from ..files import write_json, write_text
    from .isolation import in_fresh_process

    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda, but torch sees no CUDA GPU: run on a GPU machine or use --device cpu")
    rows: List[Dict] = []

    def write(complete: bool) -> Dict:
        """The record so far: written after every row, so a run stopped at a time limit keeps what it measured."""
        record = {
            "command": " ".join(["python -m fairseq_residual_tools.bench.compiled", *(argv or sys.argv[1:])]),
            "complete": complete,
            "device": args.device,
            "backend": args.backend,
            "mode": args.mode,
            "dropout": args.dropout,
            "threads": args.threads,
            "warm_cache": args.warm_cache,
            "sizes": {name: asdict(SIZE_CHOICES[name]) for name in (args.sizes or DEFAULT_SIZES[args.device])},
            "min_seconds": args.min_seconds,
            "rows": rows,
            "provenance": provenance(),
        }
        write_json(args.out / "compiled.json", record)
        write_text(args.out / "compiled.md", markdown(record))
        return record

    for size_name in args.sizes or DEFAULT_SIZES[args.device]:
        size = replace(SIZE_CHOICES[size_name], schemes=None)
        for precision in args.precisions:
            for scheme in args.schemes:
                measured = in_fresh_process(
                    "side_by_side",
                    args.threads,
                    size=size,
                    scheme=scheme,
                    device=args.device,
                    precision=precision,
                    backend=args.backend,
                    mode=args.mode,
                    steps=args.steps,
                    warmup=args.warmup,
                    dropout=args.dropout,
                    profile=args.profile,
                    warm_cache=args.warm_cache,
                    min_seconds=args.min_seconds,
                )
                rows.append(row_of(size, precision, scheme, measured))
                print(outcome({"rows": rows[-1:]}), file=sys.stderr, flush=True)
                write(complete=False)
    record = write(complete=True)
    print(markdown(record), end="", flush=True)
    return record


if __name__ == "__main__":
    main()
