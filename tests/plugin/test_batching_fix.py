"""fairseq's batching keeps every example with the plugin loaded (fairseq issue #5036)."""

import numpy as np
import pytest
from fairseq.data import data_utils

import fairseq_residual  # noqa: F401  (applies the fix)


# fairseq rounds a full batch down to a multiple of required_batch_size_multiple (8) unless its
# sentence limit is below 8: then every full batch holds exactly max_sentences
@pytest.mark.parametrize(
    "kwargs,full_batch", [(dict(max_tokens=4000), None), (dict(max_sentences=1), 1), (dict(max_sentences=7), 7)]
)
def test_every_index_is_batched_once_in_order(kwargs, full_batch):
    rng = np.random.default_rng(0)
    sizes = rng.integers(3, 30, 300)
    order = np.argsort(sizes, kind="mergesort")
    batches = data_utils.batch_by_size(
        order, num_tokens_fn=lambda i: sizes[i], required_batch_size_multiple=8, **kwargs
    )
    assert np.concatenate(batches).tolist() == order.tolist()
    full_sizes = [len(b) for b in batches[:-1]]
    assert full_sizes, "300 sentences fit in one batch: nothing tested"
    if full_batch is None:
        assert all(n % 8 == 0 for n in full_sizes), full_sizes
    else:
        assert full_sizes == [full_batch] * len(full_sizes)
