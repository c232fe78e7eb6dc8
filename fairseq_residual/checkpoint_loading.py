"""Make fairseq checkpoints loadable by torch >= 2.6 without disabling safe loading.

torch 2.6 changed ``torch.load``'s default to ``weights_only=True``: only tensors,
primitive containers and explicitly allowed classes are unpickled. fairseq's
``checkpoint_utils.load_checkpoint_to_cpu`` calls ``torch.load`` without that
argument, so every fairseq checkpoint is rejected because of the few non-tensor
objects fairseq stores in it. Instead of turning safe loading off
(``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` or ``weights_only=False``), this module
adds exactly those classes to torch's allowlist (``add_safe_globals``); any other
class in a file is still refused.
"""

import argparse

import numpy
import torch

try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct as _numpy_reconstruct
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import _reconstruct as _numpy_reconstruct  # type: ignore[no-redef]

#: the non-tensor globals found in checkpoints written by fairseq-train, surveyed
#: with ``torch.serialization.get_unsafe_globals_in_checkpoint``:
#:
#: * ``argparse.Namespace``: ``cfg.model`` of legacy (argparse) architectures
#:   such as fairseq's ``transformer``, and ``args`` in older checkpoints;
#: * numpy arrays (``ndarray``, ``dtype``, the dtype classes of numpy >= 1.25
#:   such as ``numpy.dtypes.Int64DType``, and numpy's array ``_reconstruct``
#:   function): the validation-BLEU statistics that ``--eval-bleu`` keeps in
#:   ``extra_state.metrics`` (int64 counts; float dtypes for other metrics).
#:
#: tests/plugin/test_checkpoint_loading.py re-surveys freshly written checkpoints.
_NUMPY_DTYPE_CLASSES = sorted(
    {type(numpy.dtype(t)) for t in (numpy.int64, numpy.int32, numpy.float64, numpy.float32)} - {numpy.dtype},
    key=str,
)
FAIRSEQ_CHECKPOINT_GLOBALS = [
    argparse.Namespace,
    numpy.ndarray,
    numpy.dtype,
    _numpy_reconstruct,
    *_NUMPY_DTYPE_CLASSES,
]


def allow_fairseq_checkpoints():
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:  # torch < 2.4 has no allowlist and no weights_only default
        add(FAIRSEQ_CHECKPOINT_GLOBALS)
