"""Memory of one training step, measured after one untimed step (Adam's state exists):

* ``peak_mb``: parameters + buffers + Adam state (counted from the tensors) plus the peak,
  during the step, of the bytes of live tensors the step allocated: activations, gradients,
  temporaries (on the CPU torch's profiler records every allocation and free; on a GPU the
  caching allocator's statistics). The goal is checked on this figure;
* ``rss_rise_mb`` (CPU only): the rise of the process's peak resident memory during the step
  (Linux ``VmHWM``, reset through ``/proc/self/clear_refs``): what the kernel sees, glibc's heap
  fragmentation included. It depends on the allocations the process made before, so each
  variant is probed in a fresh process (``isolation``);
* ``saved_mb``: bytes of the distinct storages autograd keeps for backward (parameters
  excluded): which tensors a scheme keeps alive.
"""

import contextlib
import ctypes
import gc
import itertools
import os
import re
import sys
import tempfile
from typing import Callable, Dict, Iterable, Iterator, Optional, Tuple

import torch
from torch.profiler import ProfilerActivity, profile

from .steps import SyntheticTask, TrainingStep, synthetic_batch
from .variants import Size, Variant, build_variant

MB = 2**20
#: the lines kineto (torch's profiler) writes straight to file descriptor 2 at each start and stop of a
#: profile, whatever its log level: "USDT:<date> <time> <pid>:<tid> <file>.cpp:<line>] profiler_start"
_KINETO_LINE = re.compile(rb"(USDT|STAGE):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \w+\.cpp:\d+\] ")


@contextlib.contextmanager
def _without_kineto_lines() -> Iterator[None]:
    """File descriptor 2 goes to a temporary file inside the block; afterwards every line of it but
    kineto's is written to the real one (the benchmark's stderr holds its progress lines only)."""
    sys.stderr.flush()
    real = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(real, 2)
            os.close(real)
            captured.seek(0)
            kept = b"".join(line for line in captured if not _KINETO_LINE.match(line))
            if kept:
                os.write(2, kept)


def saved_for_backward(forward: Callable[[], object], exclude: Iterable[torch.Tensor] = ()) -> Tuple[int, int]:
    """(number, bytes) of the distinct storages autograd saves for backward while ``forward`` runs.

    A storage counts once however many saved tensors view it, and whole (a saved view keeps
    all of its storage alive); storages of ``exclude`` (the parameters) do not count.
    """
    excluded = {t.untyped_storage().data_ptr() for t in exclude}
    storages: Dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in excluded:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return len(storages), sum(storages.values())


def saved_for_backward_bytes(forward: Callable[[], torch.Tensor], exclude: Iterable[torch.Tensor] = ()) -> int:
    """The bytes of ``saved_for_backward``."""
    return saved_for_backward(forward, exclude)[1]


def step_allocation_peak_bytes(step: Callable[[], object]) -> int:
    """Peak over ``step`` of the bytes of CPU tensors it allocated and had not yet freed."""
    with _without_kineto_lines(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    # the profiler's raw events: one "[memory]" event per allocation (+) and free (-)
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    return max(itertools.accumulate((nbytes for _, nbytes in events), initial=0))


def cuda_step_peak_bytes(step: Callable[[], object]) -> int:
    """Peak over ``step`` of the bytes of GPU tensors it allocated and had not yet freed."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        found = re.search(rf"^{key}:\s+(\d+) kB", f.read(), re.M)
    if found is None:
        raise RuntimeError(f"/proc/self/status has no {key} line")
    return int(found.group(1))


def release_free_memory() -> None:
    """Collect garbage and hand the heap's free memory back to the kernel (glibc only)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass


def step_rss_rise_bytes(step: Callable[[], object]) -> Optional[int]:
    """Rise of the peak resident set size while ``step`` runs (Linux only, else None)."""
    release_free_memory()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current VmRSS
        base = _status_kb("VmRSS")
    except OSError:
        return None
    step()
    return (_status_kb("VmHWM") - base) * 1024


def memory_probe(size: Size, variant: Variant, device: str = "cpu") -> Dict[str, Optional[float]]:
    """The memory figures (module docstring) of one training step of ``variant`` at ``size``; MB."""
    task = SyntheticTask(size.vocab)
    sample = synthetic_batch(task, size.batch, size.src_len, size.tgt_len, seed=0, device=device)
    step = TrainingStep(build_variant(variant, size, task, device=device), sample)
    step()  # Adam state exists from here on
    persistent = step.persistent_bytes()
    if device == "cuda":  # the process's resident memory does not show the GPU's
        allocated, rss = cuda_step_peak_bytes(step), None
    else:
        allocated, rss = step_allocation_peak_bytes(step), step_rss_rise_bytes(step)
    return {
        "persistent_mb": persistent / MB,
        "step_peak_mb": allocated / MB,
        "peak_mb": (persistent + allocated) / MB,
        "rss_rise_mb": None if rss is None else rss / MB,
        "saved_mb": saved_for_backward_bytes(step.loss, step.model.parameters()) / MB,  # parameters not counted
    }


def with_ratios(memory: Dict[str, Dict], reference: str) -> Dict[str, Dict]:
    """``memory`` per variant with ``<figure>_ratio`` to the reference variant added."""
    for figures in memory.values():
        for key in ("peak_mb", "rss_rise_mb", "saved_mb"):
            ref = memory[reference][key]  # None where the device has no such figure
            figures[f"{key}_ratio"] = None if ref is None else figures[key] / ref
    return memory
