"""The dual stream x^d of a deep ResiDual model stays inside fp16 range with the scale option, and an
E18D18 model runs in float16 (on CPU: torch has float16 kernels there too)."""

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
        x_dual = inputs[1]  # the output module gets (x^ln, x^d)
        seen.append(x_dual.abs().max().item())

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


def forward_with_overflow_check(model, src, src_lengths, prev):
    """The output, max |x^d| and the names of the modules whose output holds an inf or a NaN, in one pass."""
    bad = []

    def hook(module, inputs, output):
        tensors = output if isinstance(output, tuple) else (output,)
        if any(isinstance(t, torch.Tensor) and t.is_floating_point() and not torch.isfinite(t).all() for t in tensors):
            bad.append(names[module])

    names = {m: n for n, m in model.named_modules()}
    handles = [m.register_forward_hook(hook) for m in model.modules()]
    seen = []
    handles += [
        m.register_forward_pre_hook(lambda m, inputs: seen.append(inputs[1].abs().max()))  # (x^ln, x^d)
        for m in model.modules()
        if isinstance(m, DualStreamOutput)
    ]
    with torch.no_grad():
        out = model(src, src_lengths, prev)[0]
    for h in handles:
        h.remove()
    return out, max(s.item() for s in seen), bad


@pytest.mark.parametrize("scale", [1.0, 0.05])
def test_e18d18_forward_in_float16_on_cpu(scale, one_torch_thread):
    """E18D18 (the paper's deepest WMT model) in float16, which torch runs on CPU: nothing overflows,
    and x^d and the output are those of float32 to float16's precision."""
    torch.manual_seed(0)
    task = TinyTask()
    model = build_model(task, scheme="residual", layers=18, embed=64, heads=4, ffn=256, dual_stream_scale=scale)
    batch = random_batch(task, batch=4, src_len=12, tgt_len=10)
    out_fp32, x_d_fp32, _ = forward_with_overflow_check(model, *batch)
    out_fp16, x_d_fp16, overflowed = forward_with_overflow_check(model.half(), *batch)
    print(f"s={scale}: largest |x^d| {x_d_fp16:.4g} in float16 ({x_d_fp32:.4g} in float32), overflow: {overflowed}")
    assert out_fp16.dtype == torch.float16 and overflowed == []
    assert x_d_fp16 == pytest.approx(x_d_fp32, rel=2e-3) and x_d_fp16 < FP16_MAX
    assert torch.allclose(out_fp16.float(), out_fp32, atol=0.05, rtol=0.01)
