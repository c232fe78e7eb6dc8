"""Where the benchmark measures (``--device cpu`` or ``cuda``): the one module that knows how the two differ.

Models and batches are moved with ``.to(device)`` where they are built; the rest is here. A GPU runs
kernels asynchronously, so a timed run ends by waiting for the device (as ``torch.utils.benchmark``
does), and a training step's peak memory comes from PyTorch's caching allocator instead of the CPU
probes of ``memory`` (the profiler's allocations and the process's resident memory).
"""

from typing import Callable, Dict, Optional, Tuple

import torch

from ..errors import UserError


def check(device: str) -> None:
    """Stop with one line where ``cuda`` is asked for and no GPU is visible."""
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError(
            "--device cuda: no CUDA GPU visible (torch.cuda.is_available() is False); "
            "run it on a machine with a GPU, or leave out --device to measure on the CPU"
        )


def synchronize(device: str) -> Callable[[], None]:
    """A function that returns once ``device`` has done the work queued on it (on the CPU: at once)."""
    return torch.get_device_module(device).synchronize


def step_peaks(step: Callable[[], object], device: str) -> Tuple[int, Optional[int]]:
    """Peak bytes of the tensors ``step`` allocated and had not yet freed, and the rise of the process's
    resident memory during ``step`` (None on a GPU, whose memory the process's RSS does not show)."""
    if device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before, None
    from .memory import step_allocation_peak_bytes, step_rss_rise_bytes

    return step_allocation_peak_bytes(step), step_rss_rise_bytes(step)


def describe(device: str) -> Dict[str, Optional[str]]:
    """The device for the record, with the GPU's name and CUDA version on a GPU."""
    gpu = f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})" if device == "cuda" else None
    return {"device": device, "gpu": gpu}
