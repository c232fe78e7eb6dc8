"""Keep every example when fairseq builds batches (fairseq issues #5036 / #5351).

fairseq's ``data_utils.batch_by_size`` (0.12.2 and main, hence fairseq-fixed)
silently drops the last batch when its size is not a multiple of
``--required-batch-size-multiple`` (default 8). ``fairseq-generate`` then
translates fewer sentences than the test set has and reports BLEU on that
subset; validation loss and BLEU also skip the tail. Loading the plugin wraps
the function so that the dropped tail comes back as a final, smaller batch.
Batches are contiguous slices of ``indices`` in order, so the tail is exactly
the indices after the last kept batch.
"""

import functools

import numpy as np
from fairseq.data import data_utils


def keep_last_batch(batch_by_size):
    if getattr(batch_by_size, "keeps_last_batch", False):
        return batch_by_size

    @functools.wraps(batch_by_size)
    def wrapper(indices, *args, **kwargs):
        if not isinstance(indices, np.ndarray):
            indices = np.fromiter(indices, dtype=np.int64, count=-1)
        batches = batch_by_size(indices, *args, **kwargs)
        kept = sum(len(b) for b in batches)
        if kept < len(indices) and kwargs.get("fixed_shapes") is None:
            batches = list(batches) + [indices[kept:]]
        return batches

    wrapper.keeps_last_batch = True  # type: ignore[attr-defined]  # the mark that it is applied
    return wrapper


def apply():
    data_utils.batch_by_size = keep_last_batch(data_utils.batch_by_size)
