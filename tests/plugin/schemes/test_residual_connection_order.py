"""fairseq calls ``residual_connection(x, residual)`` once per sub-layer, in a fixed order.

ResiDual (x^d += s * x), DeepNet (alpha * residual) and every ``SublayerAwareLayer`` scheme
(Admin's omega per sub-layer, B2T's connection before the last LN) are written against that
contract of fairseq's ``TransformerEncoderLayerBase`` / ``TransformerDecoderLayerBase``:
``x`` is the output of the sub-layer that just ran (after dropout), ``residual`` that
sub-layer's input, and the sub-layers run self-attention, cross-attention (decoder, with an
encoder output), FFN. These tests pin it, so that a fairseq change fails here, loudly.
"""

import pytest
import torch
from helpers import TinyTask, build_model, random_batch

from fairseq_residual.schemes.base import SublayerAwareLayer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# the module whose output each sub-layer's residual sum receives, and whose input is that sub-layer's input
SUBLAYER_MODULES = {"self_attn": ("self_attn", "self_attn"), "encoder_attn": ("encoder_attn", "encoder_attn")}
SUBLAYER_MODULES["ffn"] = ("fc2", "fc1")


def observe(layer, run):
    """Events while ``run`` runs: each sub-layer module's (name, input, output) and each
    residual_connection(x, residual) call, in order."""
    events, hooks = [], []
    for sublayer, (out_name, in_name) in SUBLAYER_MODULES.items():
        out_module, in_module = getattr(layer, out_name, None), getattr(layer, in_name, None)
        if out_module is None:
            continue
        inputs = {}

        def entered(m, args, kwargs, inputs=inputs):
            inputs["x"] = args[0] if args else kwargs["query"]  # attention is called with query=..., FFN with x

        hooks.append(in_module.register_forward_pre_hook(entered, with_kwargs=True))

        def ran(m, args, out, sublayer=sublayer, inputs=inputs):
            events.append(("sublayer", sublayer, inputs["x"], out[0] if isinstance(out, tuple) else out))

        hooks.append(out_module.register_forward_hook(ran))
    inner = layer.residual_connection

    def residual_connection(x, residual):
        events.append(("residual_connection", x, residual))
        return inner(x, residual)

    layer.residual_connection = residual_connection
    try:
        run()
    finally:
        del layer.residual_connection
        for h in hooks:
            h.remove()
    return events


def pairs(events):
    """(sub-layer name, its input, its output, residual_connection's x, residual) per call."""
    assert [e[0] for e in events] == ["sublayer", "residual_connection"] * (len(events) // 2), [e[0] for e in events]
    return [(s[1], s[2], s[3], r[1], r[2]) for s, r in zip(events[::2], events[1::2])]


def run_model(model, batch, with_encoder_out=True):
    src, src_lengths, prev = batch
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=src_lengths)
        model.decoder(prev, encoder_out=enc if with_encoder_out else None)


@pytest.mark.parametrize(
    "stack,with_encoder_out,expected",
    [
        ("encoder", True, ["self_attn", "ffn"]),
        ("decoder", True, ["self_attn", "encoder_attn", "ffn"]),
        ("decoder", False, ["self_attn", "ffn"]),
    ],
)
def test_fairseq_post_ln_layer_calls_residual_connection_once_per_sublayer_in_order(stack, with_encoder_out, expected):
    task = TinyTask()
    model = build_model(task, scheme="post", layers=1)  # fairseq's own layer classes
    layer = getattr(model, stack).layers[0]
    calls = pairs(observe(layer, lambda: run_model(model, random_batch(task), with_encoder_out)))
    assert [c[0] for c in calls] == expected
    for name, sub_in, sub_out, x, residual in calls:
        assert torch.equal(x, sub_out), f"{name}: x is not the sub-layer's output (dropout is 0)"
        assert torch.equal(residual, sub_in), f"{name}: residual is not the sub-layer's input (Post-LN)"


@pytest.mark.parametrize("scheme", ["admin", "b2t"])
@pytest.mark.parametrize("stack,with_encoder_out", [("encoder", True), ("decoder", True), ("decoder", False)])
def test_sublayer_aware_layers_name_each_residual_sum_after_the_sublayer_that_ran(scheme, stack, with_encoder_out):
    task = TinyTask()
    model = build_model(task, scheme=scheme, layers=1)
    if scheme == "admin":  # profile omega first, as fairseq-train's first batch does
        model.train()
        run_model(model, random_batch(task))
        model.eval()
    layer = getattr(model, stack).layers[0]
    assert isinstance(layer, SublayerAwareLayer)
    named = []
    inner = layer.combine
    layer.combine = lambda sublayer, x, residual: named.append(sublayer) or inner(sublayer, x, residual)
    try:
        calls = pairs(observe(layer, lambda: run_model(model, random_batch(task), with_encoder_out)))
    finally:
        del layer.combine
    assert named == [c[0] for c in calls]
