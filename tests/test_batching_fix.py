"""fairseq's batching keeps every example with the plugin loaded (fairseq issue #5036)."""

import numpy as np
import pytest
from fairseq.data import data_utils

import fairseq_residual  # noqa: F401  (applies the fix)


@pytest.mark.parametrize("kwargs", [dict(max_tokens=4000), dict(max_sentences=1), dict(max_sentences=7)])
def test_every_index_is_batched_once_in_order(kwargs):
    rng = np.random.default_rng(0)
    sizes = rng.integers(3, 30, 300)
    order = np.argsort(sizes, kind="mergesort")
    batches = data_utils.batch_by_size(
        order, num_tokens_fn=lambda i: sizes[i], required_batch_size_multiple=8, **kwargs
    )
    assert np.concatenate(batches).tolist() == order.tolist()
    assert all(len(b) % 8 == 0 for b in batches[:-1]) or "max_sentences" in kwargs
