"""Speed and memory of ResiDual and the other schemes beside fairseq's stock transformer.

fairseq-residual-bench --malloc keep          # what `make bench` runs: every size -> results/bench/
fairseq-residual-bench --sizes iwslt-e6d6 --schemes all --out /tmp/bench
fairseq-residual-bench --device cuda --sizes wmt-e18d18 --out /tmp/bench-gpu
fairseq-residual-bench --counts-only          # what `make bench` runs next: counts.json / counts.md, every scheme
fairseq-residual-bench --hc-memory --malloc keep   # HC's memory at 1, 2, 4 streams: hc-memory.json / hc-memory.md
"""

import argparse
import dataclasses
from pathlib import Path
from typing import Sequence

from ..errors import UserError
from .isolation import MALLOC_SETTINGS
from .variants import SIZES, TINY


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="fairseq-residual-bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    known = {**SIZES, TINY.name: TINY}
    p.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated, from: {', '.join(known)}")
    p.add_argument(
        "--schemes",
        help="comma-separated residual_transformer schemes at every size, or 'all' (default: post,pre,residual; "
        "residual only at wmt-e18d18; with --counts-only every scheme)",
    )
    p.add_argument(
        "--counts-only",
        action="store_true",
        help="count aten operations, FLOPs and bytes of every variant instead of timing (deterministic; "
        "counts.json, counts.md; see bench/counts.py)",
    )
    p.add_argument(
        "--hc-memory",
        action="store_true",
        help="measure the memory of one training step of hc at 1, 2 and 4 streams beside Pre-LN instead of timing "
        "(hc-memory.json, hc-memory.md; see bench/stream_memory.py)",
    )
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the models run (default: cpu)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs of every variant first, per layout")
    p.add_argument("--layouts", type=int, default=2, help="fresh processes per size, variants in rotated orders")
    # 3 x 2 layouts: six rounds, the fewest whose min-max interval of the median ratio covers 95 % (report.py)
    p.add_argument("--rounds", type=int, default=3, help="interleaved timed rounds of training per layout")
    p.add_argument("--generation-rounds", type=int, default=5, help="interleaved timed rounds of generation per layout")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument(
        "--same-process",
        action="store_true",
        help="measure every size (with --hc-memory every variant) in this process, not in fresh ones",
    )
    p.add_argument(
        "--malloc",
        choices=list(MALLOC_SETTINGS),
        help="glibc malloc settings of the measuring processes (default: this environment's): 'keep' freed "
        "memory (as PyTorch's caching allocator does on a GPU) or glibc's 'default'; see isolation.py",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("results/bench"),
        help="folder for bench.json and bench.md (counts.json, counts.md)",
    )
    args = p.parse_args(argv)
    if args.same_process and args.malloc:
        p.error(
            "--malloc sets the measuring processes' environment; with --same-process set MALLOC_* variables instead"
        )
    if args.counts_only and (args.device != "cpu" or args.malloc or args.same_process):
        p.error("--counts-only counts on the CPU in this process; leave out --device, --malloc and --same-process")
    if args.hc_memory and (args.counts_only or args.schemes):
        p.error("--hc-memory measures Pre-LN and hc at 1, 2 and 4 streams; leave out --counts-only and --schemes")
    if args.device == "cuda" and args.malloc:
        p.error("--malloc sets glibc's malloc, which holds no tensors on a GPU; leave it out with --device cuda")
    unknown = [s for s in args.sizes.split(",") if s not in known]
    if unknown:
        p.error(f"unknown size(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    args.sizes = [known[s] for s in args.sizes.split(",")]
    if args.schemes:
        from fairseq_residual.schemes import SCHEMES

        schemes = tuple(SCHEMES) if args.schemes == "all" else tuple(args.schemes.split(","))
        unknown = [s for s in schemes if s not in SCHEMES]
        if unknown:
            p.error(f"unknown scheme(s) {', '.join(unknown)}; choose from {', '.join(SCHEMES)}")
        args.sizes = [dataclasses.replace(size, schemes=schemes) for size in args.sizes]
    elif args.counts_only:
        args.sizes = [dataclasses.replace(size, schemes=None) for size in args.sizes]
    return args


def main(argv: Sequence[str]) -> None:
    args = parse_args(argv)
    command = " ".join(["fairseq-residual-bench", *argv])
    if args.counts_only:
        import torch

        from . import count_report

        done = count_report.finished(args.out, command, args.sizes)
        if done:
            print(f"{args.out / 'counts.json'} already holds these counts, made at commit {done[:7]}: nothing to do")
            return
        torch.set_num_threads(args.threads)  # the counts do not depend on it, the time they take does
        record = count_report.run(args.sizes, command, args.out)
        count_report.write(record, args.out)
        print(count_report.markdown(record))
        return
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():  # before fairseq's import, which logs
        raise UserError(
            "--device cuda: no CUDA GPU visible (torch.cuda.is_available() is False); "
            "run it on a machine with a GPU, or leave out --device to measure on the CPU"
        )
    if args.hc_memory:
        from . import stream_memory

        torch.set_num_threads(args.threads)
        record = stream_memory.run(args.sizes, command, args.threads, not args.same_process, args.malloc, args.device)
        stream_memory.write(record, args.out)
        print(stream_memory.markdown(record))
        return
    from .measure import run
    from .report import markdown, write

    record = run(
        args.sizes,
        args.warmup,
        args.rounds,
        args.threads,
        command,
        gen_reps=args.generation_rounds,
        layouts=args.layouts,
        fresh_process_per_size=not args.same_process,
        malloc=args.malloc,
        device=args.device,
    )
    write(record, args.out)
    print(markdown(record))
