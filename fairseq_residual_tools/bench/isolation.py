"""Running a benchmark function in a fresh Python process, optionally with glibc malloc settings.

glibc's malloc adapts its trim and mmap thresholds to what a process allocated and freed before,
so a size measured after others would inherit their heap history (one training job trains one
size), and a memory probe would see the heap of the variants probed before it. A child prints the
function's result as its last line of JSON; its progress lines go to stderr.

``MALLOC_SETTINGS`` are the choices of ``--malloc``; without it a child inherits this process's
environment. ``keep`` makes glibc keep freed memory: every block comes from the heap (no mmap,
whose munmap hands pages back) and the heap is never trimmed, so after warm-up a step maps in no
new pages -- as PyTorch's caching allocator behaves on a GPU.
"""

import json
import logging
import os
import subprocess
import sys
from dataclasses import asdict
from typing import Dict, Optional

MALLOC_SETTINGS = {
    "keep": {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(64 << 30)},
    "default": {},
}


def malloc_environment(setting: str, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """``base`` (default: this process's environment) with glibc's ``MALLOC_*`` variables
    replaced by those of ``setting`` (a key of MALLOC_SETTINGS)."""
    if setting not in MALLOC_SETTINGS:
        raise ValueError(f"unknown malloc setting {setting!r}; choose from {', '.join(MALLOC_SETTINGS)}")
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("MALLOC_")}
    return {**env, **MALLOC_SETTINGS[setting]}


def in_fresh_process(function: str, threads: int, malloc: Optional[str] = None, **kwargs) -> Dict:
    """``function(**kwargs)`` (``measure_size``, ``memory_probe`` or ``compiled.side_by_side``; ``size`` and
    ``variant`` given as dataclasses) in a new process (``child``) with ``threads`` torch threads and the ``malloc``
    settings."""
    env = malloc_environment(malloc) if malloc else dict(os.environ)
    arguments = json.dumps({"threads": threads, **kwargs}, default=asdict)
    command = [sys.executable, "-m", f"{__package__}.child", function, arguments]
    out = subprocess.run(command, stdout=subprocess.PIPE, text=True, env={**env, "PYTHONWARNINGS": "ignore"})
    if out.returncode != 0:
        what = kwargs.get("variant", kwargs.get("size"))
        raise RuntimeError(
            f"{function} of {getattr(what, 'name', what)} failed (exit status {out.returncode}); its output is above"
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def quiet_root_logger() -> None:
    """Give the root logger its WARNING level and a handler before fairseq is imported: importing fairseq's models
    runs ``logging.basicConfig(level=DEBUG)`` (fairseq/models/wav2vec/wav2vec2_classification.py), which would print
    every library's DEBUG lines (inductor's file locks: hundreds a compile); on a configured root it does nothing."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s:%(name)s:%(message)s")
