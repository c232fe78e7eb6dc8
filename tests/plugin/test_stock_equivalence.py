"""The plugin's Post-LN / Pre-LN schemes are fairseq's stock transformer, given the same weights."""

import pytest
import torch
from helpers import TinyTask, build_model, random_batch, stock_transformer

from fairseq_residual.model import SCHEME_KEY


@pytest.mark.parametrize("scheme,normalize_before", [("post", False), ("pre", True)])
@pytest.mark.parametrize("layers", [1, 4])
def test_scheme_equals_stock_fairseq_transformer(scheme, normalize_before, layers):
    torch.manual_seed(0)
    task = TinyTask()
    ours = build_model(task, scheme=scheme, layers=layers)
    stock = stock_transformer(task, normalize_before, layers)
    state = {k: v for k, v in ours.state_dict().items() if k != SCHEME_KEY}
    stock.load_state_dict(state, strict=True)  # same parameter names, nothing left over
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        ours_out = ours(src, src_lengths, prev)[0]
        stock_out = stock(src, src_lengths, prev)[0]
    torch.testing.assert_close(ours_out, stock_out, atol=1e-6, rtol=0)
    assert (ours.encoder.layer_norm is not None) == normalize_before
