"""The dual stream x^d of a deep ResiDual model stays inside fp16 range with the scale option."""

import pytest
import torch
from helpers import TinyTask, build_model, random_batch

from fairseq_residual.schemes.residual import DualStreamOutput

FP16_MAX = torch.finfo(torch.float16).max  # 65504
DEPTH = 48


def dual_stream_max(model, src, src_lengths, prev):
    """max |x^d_{N+1}| over encoder and decoder, read at the input of each stack's output module."""
    seen = []

    def hook(module, inputs):
        stream = inputs[0]
        seen.append(stream[..., module.normalized_shape[0] :].abs().max().item())

    handles = [m.register_forward_pre_hook(hook) for m in model.modules() if isinstance(m, DualStreamOutput)]
    with torch.no_grad():
        out = model(src, src_lengths, prev)[0]
    for h in handles:
        h.remove()
    assert len(seen) == 2 and torch.isfinite(out).all()
    return max(seen)


def deep_model(scale):
    torch.manual_seed(0)
    task = TinyTask()
    model = build_model(task, scheme="residual", layers=DEPTH, embed=64, heads=4, ffn=256, dual_stream_scale=scale)
    return model, random_batch(task, batch=4, src_len=12, tgt_len=10)


def test_scaled_dual_stream_is_inside_fp16_range_at_depth_48():
    model, batch = deep_model(0.05)
    unscaled_model, _ = deep_model(1.0)
    scaled = dual_stream_max(model, *batch)
    unscaled = dual_stream_max(unscaled_model, *batch)
    # x^d accumulates 3 sub-layer outputs per decoder block: it grows with depth
    assert unscaled > 10.0
    # what is added to x^d is multiplied by s, so its magnitude is s times smaller ...
    assert scaled == pytest.approx(0.05 * unscaled, rel=1e-4)
    # ... and far inside fp16 range (leaves a 1000x margin for growth during training)
    assert scaled * 1000 < FP16_MAX


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none on this machine")
def test_deep_model_forward_is_finite_in_fp16_on_gpu():
    model, batch = deep_model(0.05)
    model = model.half().cuda()
    src, src_lengths, prev = (t.cuda() for t in batch)
    with torch.no_grad():
        out = model(src, src_lengths, prev)[0]
    assert torch.isfinite(out).all()
    assert dual_stream_max(model, src, src_lengths, prev) < FP16_MAX
