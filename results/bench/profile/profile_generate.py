"""Per-op CPU time of beam-5 generation, stock Pre-LN vs ResiDual (torch.profiler), plus wall times.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 \
        .venv/bin/python results/bench/profile/profile_generate.py SIZE THREADS > OUTPUT

Builds both models at a size of fairseq_residual/bench.py, runs the benchmark's
generation (fairseq's SequenceGenerator, beam 5, incremental decoding, a fixed number of
steps) twice on each, then profiles three generations of each (interleaved) and prints the
summed self CPU time per generation of the ops whose time differs most, and the wall time
of three more generations of each.
"""
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

import fairseq_residual  # noqa: F401
from fairseq_residual import bench

size_name, threads = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(threads)
size = bench.SIZES[size_name]
task = bench.SyntheticTask(size.vocab)
sample = bench.synthetic_batch(task, size.gen_batch, size.src_len, size.gen_len, seed=1)
variants = {v.name: v for v in bench.variants(("residual",))}
gens = {
    name: bench.Generation(bench.build_variant(variants[name], size, task), task, sample, size.gen_len)
    for name in ("stock-pre", "residual")
}
for g in gens.values():
    g()
    g()
ops = {name: {} for name in gens}
for _ in range(3):
    for name, g in gens.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            g()
        for e in prof.key_averages():
            count, total = ops[name].get(e.key, (0, 0))
            ops[name][e.key] = (count + e.count, total + e.self_cpu_time_total)
print(f"{size_name}, {threads} thread(s), torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
for name in gens:
    print(f"{name}: summed self CPU time {sum(t for _, t in ops[name].values()) / 3e3:.1f} ms per generation")
keys = sorted(
    set(ops["stock-pre"]) | set(ops["residual"]),
    key=lambda k: -abs(ops["residual"].get(k, (0, 0))[1] - ops["stock-pre"].get(k, (0, 0))[1]),
)
print(f"{'op':50s} {'count pre':>10s} {'residual':>9s} {'ms pre':>8s} {'residual':>9s}")
for k in keys[:20]:
    a, b = ops["stock-pre"].get(k, (0, 0)), ops["residual"].get(k, (0, 0))
    print(f"{k[:50]:50s} {a[0] // 3:10d} {b[0] // 3:9d} {a[1] / 3e3:8.1f} {b[1] / 3e3:9.1f}")
for _ in range(3):
    for name, g in gens.items():
        t = time.perf_counter()
        g()
        print(f"{name:10s} wall {time.perf_counter() - t:.3f} s")
