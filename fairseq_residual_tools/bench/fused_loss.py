"""A training step with fairseq's ``label_smoothed_cross_entropy`` and with ``fused_label_smoothed_cross_entropy``,
side by side in one run: step time, peak memory, and where the step's time goes with each.

    python -m fairseq_residual_tools.bench.fused_loss --out results/bench/fused-loss
    python -m fairseq_residual_tools.bench.fused_loss --quick --out /tmp/fused-loss     (tiny size, seconds)
    python -m fairseq_residual_tools.bench.fused_loss --device cuda --kernel auto --precisions fp16 bf16 ...

On a GPU (``--device cuda``; the GPU check's opt-in ``fused-loss`` part runs it) the model and batch live there,
``--kernel auto`` lets the criterion take Liger's or Cut Cross-Entropy's kernel where installed and fitting (the
record says which ran), a step's time ends with the loss read back (which waits for the step's kernels), and peak
memory is the CUDA allocator's; fp16 is offered there only (a cast model, no loss scaler: the step's work, not a
training recipe).

Each (size, precision, scheme) is measured in a fresh process (``isolation``) holding two copies of one model (the
same weights): one steps with the stock criterion, the other with the fused one, in turn, one step each per round in
alternating order, at least ``--steps`` rounds and ``--min-seconds``. A step is forward, the criterion's loss
(label smoothing 0.1), backward and Adam on a fixed synthetic batch (``steps.synthetic_batch``: no padding); bf16
casts the model, as fairseq's ``--bf16`` does (Adam updates the cast weights: the master copy is left out of the
step). glibc's malloc keeps freed memory (``--malloc keep``, as ``make bench``), so stock's logits are not mapped in
anew at every step. Then each one's peak memory (``memory.step_allocation_peak_bytes``, parameters and Adam's state
added) and, with ``--profile``, its costliest kernels. Counts that do not vary: the float32 log-probabilities the stock
criterion writes (rows x V x 4 bytes, its logits as many again in their dtype), and the chunk the fused one holds.
"""

import argparse
import copy
import functools
import re
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional

from ..provenance import provenance
from .isolation import MALLOC_SETTINGS
from .variants import CPU_STUDY, SIZES, TINY, Size, Variant

SIZE_CHOICES = {TINY.name: TINY, CPU_STUDY.name: CPU_STUDY, **SIZES}
DEFAULT_SIZES = ["cpu-study", "iwslt-e6d6", "wmt-e6d6"]
#: a size's dropout where it is not its architecture's: the CPU study trains at dropout 0 (results/bible-study)
SIZE_DROPOUT = {"cpu-study": 0.0}
DEFAULT_SCHEMES = ["pre", "residual", "hc"]
PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
#: precisions the CPU path refuses: torch's CPU float16 products are not what a CPU user trains with
CUDA_ONLY = {"fp16"}
DEFAULT_PRECISIONS = ["fp32", "bf16"]
DEVICES = ("cpu", "cuda")
KERNELS = ("torch", "auto", "liger", "cce")
LABEL_SMOOTHING = 0.1
#: the CPU flags that decide how fast bfloat16 products run (AMX tiles; AVX-512's bfloat16 dot products)
BF16_FLAGS = ("amx_bf16", "avx512_bf16")


class CriterionStep:
    """forward + the criterion's loss + backward + Adam; gradients freed after the step."""

    def __init__(self, model, criterion, sample):
        self.model, self.criterion, self.sample = model.train(), criterion, sample
        import torch

        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98))

    def __call__(self) -> float:
        loss = self.criterion(self.model, self.sample)[0]
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss)

    def persistent_bytes(self) -> int:
        import torch

        tensors = list(self.model.parameters()) + list(self.model.buffers())
        for state in self.optimizer.state.values():
            tensors += [v for v in state.values() if torch.is_tensor(v)]
        return sum(t.numel() * t.element_size() for t in tensors)


def side_by_side(
    size: Size,
    scheme: str,
    precision: str,
    steps: int,
    warmup: int,
    dropout: Optional[float],
    min_seconds: float,
    profile: bool,
    chunk_rows: int,
    device: str = "cpu",
    kernel: str = "torch",
) -> Dict[str, Dict]:
    """The stock and the fused criterion stepping in turn on two copies of one model in this process."""
    import torch
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    from fairseq_residual.criterions import FusedLabelSmoothedCrossEntropyCriterion
    from fairseq_residual.fused_loss_kernels import choose

    from .compiled import costliest_kernels
    from .memory import cuda_step_peak_bytes, step_allocation_peak_bytes
    from .steps import SyntheticTask, synthetic_batch
    from .variants import build_variant

    task = SyntheticTask(size.vocab)
    sample = synthetic_batch(task, size.batch, size.src_len, size.tgt_len, device=device)
    model = build_variant(Variant(scheme, scheme, scheme), size, task)
    model = model.to(device=device, dtype=getattr(torch, PRECISIONS[precision]))
    if dropout is not None:
        for module in model.modules():
            if type(module).__name__ == "FairseqDropout":
                module.p = dropout
    criteria = {
        "stock": LabelSmoothedCrossEntropyCriterion(task, False, LABEL_SMOOTHING),
        "fused": FusedLabelSmoothedCrossEntropyCriterion(
            task, False, LABEL_SMOOTHING, fused_loss_kernel=kernel, fused_loss_chunk_rows=chunk_rows
        ),
    }
    runs: Dict[str, CriterionStep] = {
        name: CriterionStep(copy.deepcopy(model), c, sample) for name, c in criteria.items()
    }
    seconds: Dict[str, List[float]] = {name: [] for name in runs}
    losses: Dict[str, List[float]] = {name: [] for name in runs}

    def timed(name: str) -> None:
        torch.manual_seed(len(seconds[name]))  # the same dropout masks for both at the same step
        start = time.perf_counter()
        losses[name].append(runs[name]())
        seconds[name].append(time.perf_counter() - start)

    for name in runs:
        for _ in range(warmup):
            timed(name)
    rounds = max(steps, int(min_seconds / max(max(s[-1] for s in seconds.values()), 1e-6)) + 1)
    print(f"[bench.fused_loss] {size.name} {precision} {scheme}: {rounds} rounds", file=sys.stderr, flush=True)
    names = list(runs)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            timed(name)
    peak_bytes = cuda_step_peak_bytes if device == "cuda" else step_allocation_peak_bytes
    measured: Dict[str, Dict] = {}
    for name, run in runs.items():
        measured[name] = {
            "step_s": statistics.median(seconds[name][warmup:]),
            "timed_steps": len(seconds[name]) - warmup,
            "losses": losses[name][:3],
            "peak_mb": (run.persistent_bytes() + peak_bytes(run)) / 2**20,
        }
        if profile:
            measured[name]["kernels"] = costliest_kernels(run, device, count=12)
    # what the fused criterion ran: the torch path, or the CUDA kernel ``kernel`` chose
    measured["fused"]["kernel"] = choose(kernel, device, getattr(torch, PRECISIONS[precision]), LABEL_SMOOTHING, False)
    return measured


def counted(size: Size, precision: str, chunk_rows: int) -> Dict[str, float]:
    """What the stock criterion writes and the fused one does not, in MB (shapes only)."""
    from fairseq_residual.fused_loss import chunk_rows_for

    width = (size.width or (512 if "wmt" in size.arch else 256,))[0]
    tokens, vocab = size.batch * size.tgt_len, size.vocab + 4  # fairseq's dictionary: 4 special symbols
    rows = chunk_rows or chunk_rows_for(width, vocab)
    compute = 4 if precision == "fp32" else 2
    return {
        "tokens": tokens,
        "vocab": vocab,
        "chunk_rows": rows,
        "logits_mb": tokens * vocab * compute / 2**20,
        "log_probs_mb": tokens * vocab * 4 / 2**20,
        "chunk_logits_mb": min(rows, tokens) * vocab * 4 / 2**20,
    }


def cpu_flags() -> Dict[str, object]:
    """The bfloat16 flags of this CPU (``BF16_FLAGS``) and torch's vector capability."""
    import torch

    try:
        flags = set(re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M).group(1).split())  # type: ignore[union-attr]
    except (OSError, AttributeError):
        flags = set()
    return {
        **{flag: flag in flags for flag in BF16_FLAGS},
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


def gpu_name(device: str) -> Optional[str]:
    import torch

    return torch.cuda.get_device_name() if device == "cuda" else None


def row_of(size: Size, precision: str, scheme: str, measured: Dict[str, Dict], chunk_rows: int) -> Dict:
    stock, fused = measured["stock"], measured["fused"]
    tokens = size.batch * size.tgt_len
    return {
        "size": size.name,
        "precision": precision,
        "scheme": scheme,
        **measured,
        "tokens_per_s": {name: tokens / m["step_s"] for name, m in measured.items()},
        "speed_ratio": stock["step_s"] / fused["step_s"],
        "peak_saved_mb": stock["peak_mb"] - fused["peak_mb"],
        "counted": counted(size, precision, chunk_rows),
    }


def outcome(record: Dict) -> str:
    """One line: the speed ratios' range, the peak memory saved and the kernel(s), over the record's rows."""
    rows = record["rows"]
    if not rows:
        return "no row measured"
    kernels = sorted({r["fused"].get("kernel", "torch") for r in rows})
    return (
        f"fused x stock {span([r['speed_ratio'] for r in rows], '.2f')} over {len(rows)} row(s), peak memory "
        f"{span([r['peak_saved_mb'] for r in rows], '.0f')} MB lower, kernel {', '.join(kernels)} "
        "(fused-loss/fused-loss.md)"
    )


def span(values: List[float], spec: str) -> str:
    low, high = format(min(values), spec), format(max(values), spec)
    return low if low == high else f"{low} to {high}"


def milliseconds(seconds: float) -> str:
    return f"{1e3 * seconds:.0f}" if seconds >= 0.1 else f"{1e3 * seconds:.1f}"


def markdown(record: Dict) -> str:
    kernels = sorted({r["fused"].get("kernel", "torch") for r in record["rows"]})
    where = record.get("gpu") or f"the CPU, {record.get('threads', 1)} thread(s)"
    lines = [f"On {where}; the fused criterion's kernel: {', '.join(kernels) or '-'}.", ""]
    lines += [
        "| size | precision | scheme | step ms: stock / fused | fused × stock (speed) | peak MB: stock / fused | "
        "peak saved MB | logits MB (float32 log-probs) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in record["rows"]:
        c = r["counted"]
        lines.append(
            f"| {r['size']} | {r['precision']} | {r['scheme']} | {milliseconds(r['stock']['step_s'])} / "
            f"{milliseconds(r['fused']['step_s'])} | {r['speed_ratio']:.2f} | {r['stock']['peak_mb']:.0f} / "
            f"{r['fused']['peak_mb']:.0f} | {r['peak_saved_mb']:.0f} | {c['logits_mb']:.0f} ({c['log_probs_mb']:.0f}) |"
        )
    profiled = [r for r in record["rows"] if "kernels" in r["stock"]]
    for r in profiled:
        lines += ["", f"### Where the step goes: {r['size']} {r['precision']} {r['scheme']} (ms per step)", ""]
        lines += ["| stock kernel | ms | fused kernel | ms |", "|---|---|---|---|"]
        for s, f in zip(r["stock"]["kernels"], r["fused"]["kernels"]):
            lines.append(f"| {s['name']} | {s['ms_per_step']:.1f} | {f['name']} | {f['ms_per_step']:.1f} |")
    return "\n".join(lines) + "\n"


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_residual_tools.bench.fused_loss", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sizes", nargs="+", choices=list(SIZE_CHOICES), default=DEFAULT_SIZES)
    parser.add_argument("--schemes", nargs="+", default=DEFAULT_SCHEMES, help="residual_transformer schemes")
    parser.add_argument("--precisions", nargs="+", default=DEFAULT_PRECISIONS, choices=list(PRECISIONS))
    parser.add_argument("--device", default="cpu", choices=DEVICES)
    parser.add_argument("--kernel", default="torch", choices=KERNELS, help="its --fused-loss-kernel (the CPU's: torch)")
    parser.add_argument("--steps", type=int, default=10, help="timed rounds at least (one step of each criterion)")
    parser.add_argument("--min-seconds", type=float, default=20.0, help="and at least this long")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps of each first")
    parser.add_argument(
        "--dropout", type=float, default=None, help="dropout of every layer (default: the size's, SIZE_DROPOUT)"
    )
    parser.add_argument("--chunk-rows", type=int, default=0, help="the fused criterion's chunk (0: its default)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each measuring process")
    parser.add_argument("--profile", action="store_true", help="add each one's twelve costliest kernels")
    parser.add_argument(
        "--malloc", default="keep", choices=list(MALLOC_SETTINGS), help="glibc malloc settings (isolation.py)"
    )
    parser.add_argument("--quick", action="store_true", help="the tiny size, 2 rounds: a check that it runs")
    parser.add_argument("--out", type=Path, required=True, help="folder for fused-loss.json and fused-loss.md")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.steps, args.min_seconds, args.warmup = ["tiny"], 2, 0.0, 1
    if args.device == "cpu" and CUDA_ONLY & set(args.precisions):
        gpu_only = " ".join(sorted(CUDA_ONLY & set(args.precisions)))
        parser.error(f"--precisions {gpu_only}: on a GPU only (--device cuda)")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no CUDA device here; run it on the GPU machine, or --device cpu")
    return args


def main(argv=None) -> Dict:
    from ..files import write_json, write_text
    from .isolation import in_fresh_process

    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    rows: List[Dict] = []

    def write(complete: bool) -> Dict:
        record = {
            "command": " ".join(["python -m fairseq_residual_tools.bench.fused_loss", *argv]),
            "complete": complete,
            "dropout": args.dropout
            if args.dropout is not None
            else {
                **{s: "the architecture's" for s in args.sizes},
                **{s: d for s, d in SIZE_DROPOUT.items() if s in args.sizes},
            },
            "device": args.device,
            "gpu": gpu_name(args.device),
            "kernel": args.kernel,
            "threads": args.threads,
            "malloc": args.malloc,
            "label_smoothing": LABEL_SMOOTHING,
            "sizes": {name: asdict(SIZE_CHOICES[name]) for name in args.sizes},
            "cpu_flags": cpu_flags(),
            "rows": rows,
            "provenance": provenance(),
        }
        write_json(args.out / "fused-loss.json", record)
        write_text(args.out / "fused-loss.md", markdown(record))
        return record

    measure: Callable[..., Dict] = functools.partial(
        in_fresh_process, "fused_loss_side_by_side", args.threads, args.malloc
    )
    for size_name in args.sizes:
        size = replace(SIZE_CHOICES[size_name], schemes=None)
        for precision in args.precisions:
            for scheme in args.schemes:
                measured = measure(
                    size=size,
                    scheme=scheme,
                    precision=precision,
                    steps=args.steps,
                    warmup=args.warmup,
                    dropout=SIZE_DROPOUT.get(size_name) if args.dropout is None else args.dropout,
                    min_seconds=args.min_seconds,
                    profile=args.profile,
                    chunk_rows=args.chunk_rows,
                    device=args.device,
                    kernel=args.kernel,
                )
                rows.append(row_of(size, precision, scheme, measured, args.chunk_rows))
                r = rows[-1]
                print(
                    f"[bench.fused_loss] {size_name} {precision} {scheme}: fused {r['speed_ratio']:.2f}x stock, "
                    f"peak {r['peak_saved_mb']:.0f} MB lower",
                    file=sys.stderr,
                    flush=True,
                )
                write(complete=False)
    record = write(complete=True)
    print(markdown(record), end="", flush=True)
    return record


if __name__ == "__main__":
    main()
