#!/usr/bin/env python
"""Throughput and memory of ResiDual and the other schemes vs fairseq's stock transformer.

    python scripts/bench.py                       # all sizes, writes results/bench/
    python scripts/bench.py --sizes iwslt-e6d6 --schemes all --out /tmp/bench

See fairseq_residual_tools/bench.py for what is measured and how.
"""

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fairseq_residual  # noqa: E402,F401  (registers the model and presets)
from fairseq_residual import bench  # noqa: E402
from fairseq_residual.schemes import SCHEMES  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes",
        default=",".join(bench.SIZES),
        help="comma-separated, from: " + ", ".join(list(bench.SIZES) + ["tiny"]),
    )
    parser.add_argument(
        "--schemes",
        help="comma-separated residual_transformer schemes to measure at every size, or 'all' (default: post,pre,residual)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="untimed runs of every variant first, per layout (one is not enough: the heap still grows in the next run)",
    )
    parser.add_argument(
        "--layouts",
        type=int,
        default=2,
        help="fresh processes per size, each building and running the variants in a rotated order",
    )
    parser.add_argument("--rounds", type=int, default=2, help="interleaved timed rounds of training per layout")
    parser.add_argument(
        "--generation-rounds",
        type=int,
        default=5,
        help="interleaved timed rounds of generation per layout (a run is short: more rounds for a stable median)",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument(
        "--same-process",
        action="store_true",
        help="measure every size in this process (default: each size in a fresh process, so none inherits another's allocator state)",
    )
    parser.add_argument(
        "--malloc",
        choices=list(bench.MALLOC_SETTINGS),
        help="glibc malloc settings of the measuring processes: 'keep' freed memory (MALLOC_MMAP_MAX_=0, "
        "MALLOC_TRIM_THRESHOLD_=64 GiB: no memory handed back to the kernel and faulted in again, as with PyTorch's "
        "caching allocator on a GPU; the default) or glibc's 'default' settings",
    )
    parser.add_argument("--out", type=Path, default=Path("results/bench"), help="folder for bench.json and bench.md")
    args = parser.parse_args(argv)
    if args.same_process and args.malloc:
        parser.error(
            "--malloc sets the measuring processes' environment; with --same-process set MALLOC_* variables before starting instead"
        )
    args.malloc = args.malloc or "keep"
    known = dict(bench.SIZES, tiny=bench.TINY)
    unknown = [s for s in args.sizes.split(",") if s not in known]
    if unknown:
        parser.error(f"unknown size(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    sizes = [known[s] for s in args.sizes.split(",")]
    if args.schemes:
        schemes = tuple(SCHEMES) if args.schemes == "all" else tuple(args.schemes.split(","))
        unknown = [s for s in schemes if s not in SCHEMES]
        if unknown:
            parser.error(f"unknown scheme(s) {', '.join(unknown)}; choose from {', '.join(SCHEMES)}")
        sizes = [dataclasses.replace(size, schemes=schemes) for size in sizes]
    record = bench.run(
        sizes,
        args.warmup,
        args.rounds,
        args.threads,
        bench.command_line(),
        fresh_process_per_size=not args.same_process,
        malloc=args.malloc,
        log=lambda m: print(m, flush=True),
        gen_reps=args.generation_rounds,
        layouts=args.layouts,
    )
    bench.write(record, args.out)
    print(bench.markdown(record))


if __name__ == "__main__":
    main()
