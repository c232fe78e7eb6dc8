"""Per-op CPU time of one training step, stock Pre-LN vs ResiDual (torch.profiler), plus page faults.

    .venv/bin/python results/bench/profile/profile_step.py SIZE THREADS > OUTPUT

Builds both models at a size of fairseq_residual/bench.py, warms each up with one step,
then profiles two steps of each (interleaved) and prints the summed self CPU time of
every op whose time or count differs most, and the minor page faults and user/system
CPU seconds of three further steps of each (getrusage).

Outputs here, 2026-11-30 on the benchmark machine: iwslt-e6d6-1thread.txt,
wmt-e6d6-1thread.txt, wmt-e18d18-2threads.txt (this tree, commit 0b1a092), and
before-fix-iwslt-e6d6-1thread.txt (the same script run from an exported copy of commit
0b1a092 whose fairseq_residual/schemes/residual.py is the one of commit 16b92f5).
"""
import resource
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
sample = bench.synthetic_batch(task, size.batch, size.src_len, size.tgt_len)
steps = {}
for variant in bench.variants(("residual",)):
    if variant.name in ("stock-pre", "residual"):
        steps[variant.name] = bench.TrainingStep(bench.build_variant(variant, size, task), sample, task.target_dictionary.pad())
        steps[variant.name]()
ops = {name: {} for name in steps}
for _ in range(2):
    for name, step in steps.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        for e in prof.key_averages():
            count, total = ops[name].get(e.key, (0, 0))
            ops[name][e.key] = (e.count, total + e.self_cpu_time_total)
print(f"{size_name}, {threads} thread(s), torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
for name in steps:
    print(f"{name}: summed self CPU time of one step {sum(t for _, t in ops[name].values()) / 2e3:.1f} ms")
ref, res = ops["stock-pre"], ops["residual"]
keys = sorted(set(ref) | set(res), key=lambda k: -abs(res.get(k, (0, 0))[1] - ref.get(k, (0, 0))[1]))
print(f"{'op':60s} {'count pre':>9s} {'residual':>9s} {'ms pre':>8s} {'residual':>9s}")
for k in keys[:20]:
    (c0, t0), (c1, t1) = ref.get(k, (0, 0)), res.get(k, (0, 0))
    print(f"{k[:60]:60s} {c0:9d} {c1:9d} {t0 / 2e3:8.1f} {t1 / 2e3:9.1f}")
for _ in range(3):
    for name, step in steps.items():
        before, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        step()
        wall, after = time.perf_counter() - wall, resource.getrusage(resource.RUSAGE_SELF)
        print(f"{name:10s} wall {wall:5.2f} s  user {after.ru_utime - before.ru_utime:5.2f} s  "
              f"sys {after.ru_stime - before.ru_stime:5.2f} s  minor faults {after.ru_minflt - before.ru_minflt}")
