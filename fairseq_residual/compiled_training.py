"""``--torch-compile``: the model's training forward compiled by ``torch.compile``; evaluation and generation eager.

    fairseq-train DATA --user-dir fairseq_residual --arch residual_transformer --torch-compile ...
    (hydra: model.torch_compile=true; model.torch_compile_backend, model.torch_compile_mode as torch.compile's)

The model is not wrapped. In training its ``forward`` calls the compiled form of its class's eager forward with the
model as the first argument (``training_forward``), so modules, parameter names and checkpoints are an eager run's:
a compiled run resumes eagerly and the reverse, and its checkpoints average, load in the hub and generate as any
other. Validation and generation run eagerly: incremental decoding changes its inputs' shapes and its cached state
at every step, which would recompile instead of paying.

fairseq's batches vary in sentences and length: torch.compile's automatic dynamic shapes compile the first shape
as it is, recompile once with the sizes that changed made symbolic, and reuse that graph after
(docs/performance.md: recompiles counted over an epoch). Inductor writes C++ kernels on a CPU: without a C++
compiler the first training step stops with one line (``check_compiler``). Where inductor was measured slower than
eager (a CPU, from ``CPU_DECLINE_WIDTH`` up) the option declines in one line and trains eagerly (``declined``).
"""

import logging
from dataclasses import field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import torch

from .errors import ConfigError

#: (name, type, dataclasses.Field) specs, added to both models' options (config.py, language_model.py)
FIELDS: List[Tuple[str, Any, Any]] = [
    (
        "torch_compile",
        bool,
        field(
            default=False,
            metadata={
                "help": "compile the model's training forward (and so its backward) with torch.compile; validation "
                "and generation stay eager, checkpoints are an eager run's (docs/performance.md: when it pays)"
            },
        ),
    ),
    (
        "torch_compile_backend",
        str,
        field(
            default="inductor",
            metadata={
                "help": "--torch-compile only: torch.compile's backend (aot_eager compiles without code generation)"
            },
        ),
    ),
    (
        "torch_compile_mode",
        Optional[str],
        field(
            default=None,
            metadata={
                "help": "--torch-compile only: torch.compile's mode (reduce-overhead, max-autotune; unset: torch's "
                "default)"
            },
        ),
    ),
]

#: on a CPU, inductor's compiled training step was measured slower than eager's from this model width up (Pre-LN and
#: ResiDual 0.69-0.76x at widths 64 and 256, 1.13-1.14x at width 16): there the option declines (docs/performance.md)
CPU_DECLINE_WIDTH = 64

_COMPILED: Dict[Tuple[Callable, str, Optional[str]], Callable] = {}
_DECLINED_SAID: Set[int] = set()

logger = logging.getLogger("fairseq_residual.compile")


def options_of(cfg) -> Dict[str, Any]:
    """The three options as ``cfg`` has them (a model built before they existed has their defaults)."""
    return {name: getattr(cfg, name, f.default) for name, _, f in FIELDS}


def check_compiler(backend: str, device: torch.device) -> None:
    """Inductor on a CPU needs a C++ compiler: without one, the error names the fix."""
    if backend != "inductor" or device.type != "cpu":
        return
    from torch._inductor import cpp_builder, exc

    try:
        cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        raise ConfigError(
            "--torch-compile on the CPU needs a C++ compiler (inductor writes C++ kernels) and none was found: "
            "install one (apt install g++), point CXX at one, or drop --torch-compile"
        ) from None


def declined(backend: str, device: torch.device, width: int) -> Optional[str]:
    """Why ``--torch-compile`` trains eagerly here (one line), or None where it compiles."""
    if backend != "inductor" or device.type != "cpu" or width < CPU_DECLINE_WIDTH:
        return None
    return (
        f"--torch-compile declined: on the CPU inductor's compiled training was measured slower than eager from "
        f"width {CPU_DECLINE_WIDTH} up (docs/performance.md), and this model's width is {width}: training eagerly "
        "(--torch-compile-backend aot_eager compiles anyway)"
    )


def compiled(eager_forward: Callable, backend: str, mode: Optional[str]) -> Callable:
    """``torch.compile(eager_forward)``, made once per process for each (forward, backend, mode)."""
    key = (eager_forward, backend, mode)
    if key not in _COMPILED:
        _COMPILED[key] = torch.compile(eager_forward, backend=backend, mode=mode)
    return _COMPILED[key]


def training_forward(eager_forward: Callable, model: Any, options: Dict[str, Any], *args, **kwargs):
    """``eager_forward(model, *args, **kwargs)``: compiled with the options' backend and mode (``compiled``), or
    eagerly where the option declines (said once per process and width)."""
    backend, mode = options["torch_compile_backend"], options["torch_compile_mode"]
    device, width = next(model.parameters()).device, int(model.decoder.embed_dim)
    reason = declined(backend, device, width)
    if reason is not None:
        if width not in _DECLINED_SAID:
            _DECLINED_SAID.add(width)
            logger.info(reason)
        return eager_forward(model, *args, **kwargs)
    check_compiler(backend, device)
    return compiled(eager_forward, backend, mode)(model, *args, **kwargs)
