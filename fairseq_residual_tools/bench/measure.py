"""Measuring the sizes: speed and memory of every variant, each size in fresh processes."""

import functools
import os
import sys
import time
from dataclasses import asdict
from typing import Callable, Dict, List, Optional, Sequence

from .isolation import in_fresh_process, malloc_variables
from .variants import REFERENCE, Size, build_variant, model_args, variants

Log = Callable[[str], None]
#: progress of a measuring process: its stdout carries its result (``isolation``)
_stderr = functools.partial(print, file=sys.stderr, flush=True)


def measure_size(
    size: Size,
    warmup: int,
    reps: int,
    gen_reps: Optional[int] = None,
    layout: int = 0,
    memory: bool = True,
    fresh_process_memory: bool = True,
    device: str = "cpu",
    log: Log = _stderr,
) -> Dict:
    """Training and generation speed of every variant at ``size`` on ``device`` in this process
    (``reps`` and ``gen_reps`` interleaved rounds, ``gen_reps`` defaulting to ``reps``) and, if
    ``memory``, their memory, each variant in a fresh process if ``fresh_process_memory``.

    ``layout`` rotates the order in which the models are built and run: where a model's weights
    land in memory depends on what was allocated before, and that alone moves one model's speed
    by a few percent; ``timing.pool_layouts`` combines several rotations.
    """
    import torch

    from .data import SyntheticTask, synthetic_batch
    from .device import synchronize
    from .memory import memory_probe, release_free_memory, with_ratios
    from .steps import BEAM, Generation, TrainingStep
    from .timing import interleaved, speed_table

    gen_reps = reps if gen_reps is None else gen_reps
    wait = synchronize(device)
    task = SyntheticTask(size.vocab)
    pad = task.target_dictionary.pad()
    train_sample = synthetic_batch(task, size.batch, size.src_len, size.tgt_len, seed=0, device=device)
    gen_sample = synthetic_batch(task, size.gen_batch, size.src_len, size.gen_len, seed=1, device=device)
    chosen = variants(size.schemes)
    first = layout % len(chosen)
    order = chosen[first:] + chosen[:first]  # the order in which the models are built and run
    models = {v.name: build_variant(v, size, task, device=device) for v in order}
    result = {
        "size": asdict(size),
        "model": model_args(size),
        "parameters": {v.name: sum(p.numel() for p in models[v.name].parameters()) for v in chosen},
        "variants": {v.name: v.label for v in chosen},
        "layouts": [[v.name for v in order]],
        "train_tokens": train_sample["ntokens"],
        "malloc_environment": malloc_variables(),
    }

    log(f"[{size.name}] layout {layout + 1}: training, {len(chosen)} variants, warm-up {warmup}, {reps} rounds")
    steps = {n: TrainingStep(m, train_sample, pad) for n, m in models.items()}
    times = interleaved(steps, warmup=max(warmup, 1), reps=reps, wait=wait)  # >= 1: Adam state exists
    result["train"] = speed_table(times, train_sample["ntokens"], "tokens_per_s")
    del steps
    release_free_memory()

    log(f"[{size.name}] layout {layout + 1}: generation, beam {BEAM}, {size.gen_batch} x {size.gen_len} tokens")
    gens = {n: Generation(m, task, gen_sample, size.gen_len) for n, m in models.items()}
    lengths = {n: sorted({len(h["tokens"]) for hyps in g() for h in hyps}) for n, g in gens.items()}
    times = interleaved(gens, warmup=warmup, reps=gen_reps, wait=wait)
    result["generate"] = speed_table(times, size.gen_batch, "sentences_per_s")
    for name in gens:
        result["generate"][name]["hypothesis_lengths"] = lengths[name]
    del gens, models
    release_free_memory()

    if memory:
        where = ", each in a fresh process" if fresh_process_memory else ""
        log(f"[{size.name}] memory: one training step per variant{where}")
        threads = torch.get_num_threads()
        probed = {
            v.name: in_fresh_process("memory_probe", threads, size=size, variant=v, device=device)
            if fresh_process_memory
            else memory_probe(size, v, device)
            for v in chosen
        }
        result["memory"] = with_ratios(probed, REFERENCE)
    return result


def load_average() -> Optional[List[float]]:
    try:
        return list(os.getloadavg())
    except OSError:  # not available on this platform
        return None


def run(
    sizes: Sequence[Size],
    warmup: int,
    reps: int,
    threads: int,
    command: str,
    gen_reps: Optional[int] = None,
    layouts: int = 1,
    fresh_process_per_size: bool = True,
    fresh_process_memory: bool = True,
    malloc: Optional[str] = None,
    device: str = "cpu",
    log: Log = print,
) -> Dict:
    """The benchmark record: ``sizes`` measured on ``device`` ``layouts`` times each, in fresh processes
    with the ``malloc`` settings (``isolation``), or all in this process if not ``fresh_process_per_size``;
    the rounds of a size's layouts pooled; memory measured in its first layout."""
    import torch

    from ..provenance import provenance
    from .device import describe
    from .timing import pool_layouts

    record = {
        "command": command,
        **provenance(),
        "threads": threads,
        **describe(device),
        "load_average_before": load_average(),
        "warmup": warmup,
        "rounds": reps,
        "generation_rounds": reps if gen_reps is None else gen_reps,
        "layouts": layouts,
        "fresh_process_per_size": fresh_process_per_size,
        "malloc": malloc if fresh_process_per_size else None,
        "reference": REFERENCE,
        "sizes": [],
    }
    measure = dict(
        warmup=warmup, reps=reps, gen_reps=gen_reps, fresh_process_memory=fresh_process_memory, device=device
    )
    callers_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    started = time.perf_counter()
    try:
        for size in sizes:
            size_started, load_before = time.perf_counter(), load_average()
            results = []
            for layout in range(layouts):
                settings = dict(measure, layout=layout, memory=layout == 0)
                if fresh_process_per_size:
                    log(f"[{size.name}] layout {layout + 1} of {layouts}, in a fresh process")
                    results.append(in_fresh_process("measure_size", threads, malloc, size=size, **settings))
                else:
                    results.append(measure_size(size, log=log, **settings))
            result = pool_layouts(results)
            # the machine may be shared: each size records how busy it was around it
            result.update(
                seconds=time.perf_counter() - size_started,
                load_average_before=load_before,
                load_average_after=load_average(),
            )
            record["sizes"].append(result)
    finally:
        torch.set_num_threads(callers_threads)
    record["seconds"] = time.perf_counter() - started
    record["load_average_after"] = load_average()
    return record
