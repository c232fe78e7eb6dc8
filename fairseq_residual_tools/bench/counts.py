"""The work of a training step and of a generation, counted rather than timed: the same numbers on every run.

Every aten operation dispatched below autograd (forward, backward and the optimizer; what a GPU would launch as
kernels) is recorded by kind with

* FLOPs: ``torch.utils.flop_counter``'s formulas (matrix products and attention; elementwise work counts 0);
* bytes: the bytes of its input and output tensors, each tensor counted over the elements it addresses (a
  broadcast dimension, stride 0, once); a 0-dim tensor is a kernel argument and counts 0.

*Free* operations move no data and launch nothing: views (every output aliases an input and nothing is
written, e.g. ``view``, ``transpose``, ``detach``, ``_unsafe_view``), allocations (``ALLOCATIONS``) and the
profiler's markers (no tensor in or out). They are listed by kind but count in neither ``ops`` nor ``bytes``.
The counts depend on shapes only, never on values or timing: ``step_counts`` of the same size and variant are
equal on every run (tests/tools/bench/test_counts.py).

A training step is counted after one uncounted step (Adam's state exists, Admin has profiled), a generation
after one uncounted generation: what every later step does. Adam runs its per-parameter loop here (on CPU
``torch.optim.Adam`` does not group parameters; on a GPU its default ``foreach`` path does).
"""

from typing import Callable, Dict, Union

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from .variants import Size, Variant, variants

#: operations that only allocate: no kernel, nothing read or written
ALLOCATIONS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements ``t`` addresses; 0 for a 0-dim tensor (a kernel argument)."""
    if t.dim() == 0:
        return 0
    elements = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            elements *= size
    return elements * t.element_size()


class WorkCounter(TorchDispatchMode):
    """Inside ``with WorkCounter() as c:``, ``c.kinds[kind]`` = [operations, FLOPs, bytes] and ``c.free[kind]``
    = the number of free operations (module docstring), per aten operation kind (``add``, ``addmm`` ...)."""

    def __init__(self):
        super().__init__()
        self.kinds: Dict[str, list] = {}
        self.free: Dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        kind = func.overloadpacket.__name__
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if _is_free(func, kind, inputs, outputs):
            self.free[kind] = self.free.get(kind, 0) + 1
            return out
        flops = (
            flop_registry[func.overloadpacket](*args, **kwargs, out_val=out)
            if func.overloadpacket in flop_registry
            else 0
        )
        counts = self.kinds.setdefault(kind, [0, 0, 0])
        counts[0] += 1
        counts[1] += int(flops)
        counts[2] += sum(map(tensor_bytes, inputs)) + sum(map(tensor_bytes, outputs))
        return out

    def totals(self) -> Dict:
        """ops, flops, bytes over all kinds; ``by_kind`` sorted by name; ``free``: free operations by kind."""
        kinds = dict(sorted(self.kinds.items()))
        return {
            "ops": sum(c[0] for c in kinds.values()),
            "flops": sum(c[1] for c in kinds.values()),
            "bytes": sum(c[2] for c in kinds.values()),
            "by_kind": {kind: dict(zip(("ops", "flops", "bytes"), c)) for kind, c in kinds.items()},
            "free": dict(sorted(self.free.items())),
        }


def _is_free(func, kind: str, inputs, outputs) -> bool:
    if kind in ALLOCATIONS or not (inputs or outputs):
        return True
    if func._schema.is_mutable or not outputs:
        return False
    storages = {t.untyped_storage().data_ptr() for t in inputs}
    return all(t.untyped_storage().data_ptr() in storages for t in outputs)


def count(work: Callable[[], object]) -> Dict:
    """``WorkCounter.totals`` of one call of ``work``."""
    with WorkCounter() as counter:
        work()
    return counter.totals()


def _variant(variant: Union[Variant, str]) -> Variant:
    if isinstance(variant, Variant):
        return variant
    found = {v.name: v for v in variants()}
    if variant not in found:
        raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(found)}")
    return found[variant]


def step_counts(size: Size, variant: Union[Variant, str]) -> Dict[str, Dict]:
    """The counted work of ``variant`` (a ``Variant`` or its name: ``stock-pre``, ``residual`` ...) at ``size``
    (any ``Size``, the bench's or another): {"train": one training step, "generate": one beam search}, each
    {"ops", "flops", "bytes", "by_kind", "free"} (``WorkCounter.totals``); the training step also has
    "saved_tensors" and "saved_bytes", the distinct storages autograd keeps for backward (parameters excluded).
    On the bench's batches of ``size`` (``steps``), fp32 on the CPU."""
    from .memory import saved_for_backward
    from .steps import SyntheticTask, TrainingStep, generation, synthetic_batch
    from .variants import build_variant

    task = SyntheticTask(size.vocab)
    train_sample = synthetic_batch(task, size.batch, size.src_len, size.tgt_len, seed=0)
    gen_sample = synthetic_batch(task, size.gen_batch, size.src_len, size.gen_len, seed=1)
    model = build_variant(_variant(variant), size, task)
    step = TrainingStep(model, train_sample)
    step()  # Adam's state exists, Admin has profiled its omega
    train: Dict = {}
    saved = saved_for_backward(lambda: train.update(count(step)), model.parameters())
    train["saved_tensors"], train["saved_bytes"] = saved
    generate = generation(model, task, gen_sample, size.gen_len)
    generate()
    return {"train": train, "generate": count(generate)}
