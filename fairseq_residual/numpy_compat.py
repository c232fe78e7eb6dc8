"""numpy 1's ``numpy.compat.long`` for the fairseq modules that still use it (numpy 2.0 removed ``numpy.compat``).

fairseq's ``TokenBlockDataset`` (every ``language_modeling`` dataset) makes its slice indices with
``dtype=np.compat.long``; under numpy 2 building the dataset raises ``AttributeError: module 'numpy' has no
attribute 'compat'``, so ``fairseq-train --task language_modeling`` and ``fairseq-eval-lm`` cannot start.
``LanguagePairDataset`` uses it too, with ``--num-batch-buckets``. numpy 1 defined ``compat.long`` as Python's
``int``; the patch gives those two fairseq modules a ``np`` that is numpy plus that one name, and leaves numpy
itself (and every other module's view of it) as it is.
"""

import types

import numpy
from fairseq.data import language_pair_dataset, token_block_dataset

#: the fairseq modules whose global ``np`` is replaced
MODULES = (token_block_dataset, language_pair_dataset)


class NumpyWithCompat(types.ModuleType):
    """numpy, plus ``compat.long`` as numpy 1 defined it (``int``)."""

    fairseq_residual = True  # the mark of what the plugin replaced (patches.PATCHES)
    compat = types.SimpleNamespace(long=int)

    def __getattr__(self, name):
        return getattr(numpy, name)


def apply() -> None:
    for module in MODULES:
        if hasattr(numpy, "compat") or isinstance(module.np, NumpyWithCompat):
            continue  # numpy 1, or applied already
        module.np = NumpyWithCompat("numpy")
