"""Interleaved timing and the ratios to the reference variant.

Variants run in rounds (A B C A B C ...), so slow phases of a shared machine hit every
variant alike, and a variant's speed ratio is taken within one round. Beside wall time,
each run records the process's user and system CPU time and its minor page faults: on CPU,
glibc's malloc may hand freed memory back to the kernel and map it in again, which shows up
in system time and page faults, not in the arithmetic (user time).
"""

import gc
import resource
import statistics
import time
from typing import Callable, Dict, List, Sequence

from .variants import REFERENCE

TIMING_KEYS = ("wall_s", "user_s", "sys_s", "minor_faults")


def interleaved(
    jobs: Dict[str, Callable[[], object]], warmup: int, reps: int, wait: Callable[[], None] = lambda: None
) -> Dict[str, Dict[str, List[float]]]:
    """Run every job ``warmup`` times, then ``reps`` rounds of one run each, in the given order;
    each run ends with ``wait()``, which returns once the device has done the run's work.

    Returns per job the TIMING_KEYS of each round. The garbage collector runs between rounds,
    never inside one (a full collection costs about 0.2 s with fairseq's objects alive).
    """
    for _ in range(warmup):
        for job in jobs.values():
            job()
            wait()
    times = {name: {key: [] for key in TIMING_KEYS} for name in jobs}
    gc_was_enabled = gc.isenabled()
    try:
        for _ in range(reps):
            gc.collect()
            gc.disable()
            for name, job in jobs.items():
                before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                job()
                wait()
                wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
                times[name]["wall_s"].append(wall)
                times[name]["user_s"].append(after.ru_utime - before.ru_utime)
                times[name]["sys_s"].append(after.ru_stime - before.ru_stime)
                times[name]["minor_faults"].append(after.ru_minflt - before.ru_minflt)
    finally:
        if gc_was_enabled:
            gc.enable()
    return times


def ratio_summary(reference: Sequence[float], other: Sequence[float]) -> Dict[str, float]:
    """Speed of ``other`` relative to ``reference`` (reference seconds / other seconds) in each
    round, as min / median / max over the rounds."""
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
