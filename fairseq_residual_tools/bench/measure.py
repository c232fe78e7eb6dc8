"""Measuring the sizes: speed and memory of every variant, each size in fresh processes."""

import functools
import gc
import os
import resource
import statistics
import sys
import time
from dataclasses import asdict
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from .isolation import in_fresh_process
from .variants import REFERENCE, Size, build_variant, model_args, variants

TIMING_KEYS = ("wall_s", "user_s", "sys_s", "minor_faults")
Log = Callable[[str], None]
#: progress lines, here and in a measuring process, whose stdout carries its result (``isolation``)
_stderr = functools.partial(print, file=sys.stderr, flush=True)


def interleaved(
    jobs: Mapping[str, Callable[[], object]], warmup: int, reps: int, wait: Callable[[], None]
) -> Dict[str, Dict[str, List[float]]]:
    """``warmup`` untimed rounds, then ``reps`` timed rounds of one run of every job in order, each run ended
    by ``wait()`` (the device's synchronize); per job the TIMING_KEYS of each timed round.

    Interleaving makes slow phases of a shared machine hit every variant alike, and a variant's speed ratio
    is taken within one round. Beside wall time, user and system CPU time and minor page faults: on CPU,
    glibc's malloc may hand freed memory back to the kernel and map it in again, which shows up in system
    time and page faults, not in the arithmetic (user time). The garbage collector runs between rounds,
    never inside one (a full collection costs about 0.2 s with fairseq's objects alive).
    """
    times: Dict[str, Dict[str, List[float]]] = {name: {key: [] for key in TIMING_KEYS} for name in jobs}
    try:
        for i in range(warmup + reps):
            gc.collect()
            gc.disable()
            for name, job in jobs.items():
                before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                job()
                wait()
                wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
                if i < warmup:
                    continue
                times[name]["wall_s"].append(wall)
                times[name]["user_s"].append(after.ru_utime - before.ru_utime)
                times[name]["sys_s"].append(after.ru_stime - before.ru_stime)
                times[name]["minor_faults"].append(after.ru_minflt - before.ru_minflt)
    finally:
        gc.enable()
    return times


def ratio_summary(reference: Sequence[float], other: Sequence[float]) -> Dict[str, float]:
    """Speed of ``other`` relative to ``reference`` (reference seconds / other seconds) per round: min, median, max."""
    ratios = [r / o for r, o in zip(reference, other)]
    return {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)}


def speed_table(times: Dict[str, Dict[str, List[float]]], amount: float, unit: str) -> Dict[str, Dict]:
    """Per variant: its timings, ``amount`` per wall second of each run (under ``unit``), and
    the wall and user-CPU ratios to REFERENCE."""
    return {
        name: {
            **t,
            unit: [amount / wall for wall in t["wall_s"]],
            "ratio_to_reference": ratio_summary(times[REFERENCE]["wall_s"], t["wall_s"]),
            "user_cpu_ratio_to_reference": ratio_summary(times[REFERENCE]["user_s"], t["user_s"]),
        }
        for name, t in times.items()
    }


def pool_layouts(results: Sequence[Dict]) -> Dict:
    """One size's results from several layouts as one: the rounds of every layout side by side,
    ratios recomputed over all of them, the memory of the first (the layout that measures it)."""
    pooled = dict(results[0])
    pooled["layouts"] = [order for r in results for order in r["layouts"]]
    for table, amount, unit in (
        ("train", results[0]["train_tokens"], "tokens_per_s"),
        ("generate", results[0]["size"]["gen_batch"], "sentences_per_s"),
    ):
        times = {
            name: {key: [x for r in results for x in r[table][name][key]] for key in TIMING_KEYS}
            for name in results[0]["variants"]
        }
        pooled[table] = speed_table(times, amount, unit)
    for name in results[0]["variants"]:
        pooled["generate"][name]["hypothesis_lengths"] = results[0]["generate"][name]["hypothesis_lengths"]
    return pooled


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
    by a few percent; ``pool_layouts`` combines several rotations.
    """
    import torch

    from .memory import memory_probe, release_free_memory, with_ratios
    from .steps import BEAM, SyntheticTask, TrainingStep, generation, synthetic_batch

    gen_reps = reps if gen_reps is None else gen_reps
    # a GPU runs kernels asynchronously: a timed run ends once the device has done its work
    wait = torch.get_device_module(device).synchronize
    task = SyntheticTask(size.vocab)
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
        "malloc_environment": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")},
    }

    log(f"[{size.name}] layout {layout + 1}: training, {len(chosen)} variants, warm-up {warmup}, {reps} rounds")
    steps = {n: TrainingStep(m, train_sample) for n, m in models.items()}
    times = interleaved(steps, warmup=max(warmup, 1), reps=reps, wait=wait)  # >= 1: Adam state exists
    result["train"] = speed_table(times, train_sample["ntokens"], "tokens_per_s")
    del steps
    release_free_memory()

    log(f"[{size.name}] layout {layout + 1}: generation, beam {BEAM}, {size.gen_batch} x {size.gen_len} tokens")
    gens = {n: generation(m, task, gen_sample, size.gen_len) for n, m in models.items()}
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
        probe = memory_probe
        if fresh_process_memory:
            probe = functools.partial(in_fresh_process, "memory_probe", torch.get_num_threads())
        result["memory"] = with_ratios({v.name: probe(size=size, variant=v, device=device) for v in chosen}, REFERENCE)
    return result


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
    log: Log = _stderr,
) -> Dict:
    """The benchmark record: ``sizes`` measured on ``device`` ``layouts`` times each, in fresh processes
    with the ``malloc`` settings (``isolation``), or all in this process if not ``fresh_process_per_size``;
    the rounds of a size's layouts pooled; memory measured in its first layout."""
    import torch

    from ..provenance import provenance

    record: Dict[str, Any] = {
        "command": command,
        **provenance(),
        "threads": threads,
        "device": device,
        "gpu": f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})" if device == "cuda" else None,
        "load_average_before": os.getloadavg(),
        "warmup": warmup,
        "rounds": reps,
        "generation_rounds": reps if gen_reps is None else gen_reps,
        "layouts": layouts,
        "fresh_process_per_size": fresh_process_per_size,
        "malloc": malloc,
        "reference": REFERENCE,
        "sizes": [],
    }
    settings: Dict[str, Any] = dict(
        warmup=warmup, reps=reps, gen_reps=gen_reps, fresh_process_memory=fresh_process_memory, device=device
    )
    measure = functools.partial(measure_size, log=log, **settings)
    if fresh_process_per_size:
        measure = functools.partial(in_fresh_process, "measure_size", threads, malloc, **settings)
    torch.set_num_threads(threads)
    started = time.perf_counter()
    for size in sizes:
        size_started, load_before = time.perf_counter(), os.getloadavg()
        result = pool_layouts([measure(size=size, layout=layout, memory=layout == 0) for layout in range(layouts)])
        # the machine may be shared: each size records how busy it was around it
        result.update(
            seconds=time.perf_counter() - size_started,
            load_average_before=load_before,
            load_average_after=os.getloadavg(),
        )
        record["sizes"].append(result)
    record["seconds"] = time.perf_counter() - started
    record["load_average_after"] = os.getloadavg()
    return record
