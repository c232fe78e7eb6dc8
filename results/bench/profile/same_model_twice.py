"""Two instances of the same model in one process are not equally fast: why the benchmark pools layouts.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 \
        .venv/bin/python results/bench/profile/same_model_twice.py ORDER ROUNDS > OUTPUT

Builds the WMT E6D6 variants of fairseq_residual/bench.py plus a second, identical
instance of stock Pre-LN (``stock-pre-B``), in the comma-separated ORDER; runs one
training step of each (as the benchmark does before generation), then times beam-5
generation in interleaved rounds and prints each variant's ratio to ``stock-pre``
(median, min-max over the rounds). ``stock-pre-B`` runs exactly the same code and
weights shapes as ``stock-pre``; its distance from 1 is what memory placement alone does.
"""
import dataclasses
import statistics
import sys
import time

import torch

import fairseq_residual  # noqa: F401
from fairseq_residual import bench

torch.set_num_threads(2)
size = bench.SIZES["wmt-e6d6"]
task = bench.SyntheticTask(size.vocab)
variants = {v.name: v for v in bench.variants(size.schemes)}
variants["stock-pre-B"] = dataclasses.replace(variants["stock-pre"], name="stock-pre-B")
order, rounds = sys.argv[1].split(","), int(sys.argv[2])
models = {name: bench.build_variant(variants[name], size, task) for name in order}
train = bench.synthetic_batch(task, size.batch, size.src_len, size.tgt_len, seed=0)
steps = {name: bench.TrainingStep(models[name], train, task.target_dictionary.pad()) for name in order}
bench.interleaved(steps, warmup=1, reps=1)
del steps
sample = bench.synthetic_batch(task, size.gen_batch, size.src_len, size.gen_len, seed=1)
gens = {name: bench.Generation(models[name], task, sample, size.gen_len) for name in order}
times = bench.interleaved(gens, warmup=2, reps=rounds)
print(f"order {','.join(order)}; {rounds} rounds; torch {torch.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
for name in order:
    r = bench.ratio_summary(times["stock-pre"]["wall_s"], times[name]["wall_s"])
    median = statistics.median(times[name]["wall_s"])
    print(f"{name:11s} median {median:.3f} s  generation speed / stock-pre {r['median']:.3f} ({r['min']:.3f}-{r['max']:.3f})")
