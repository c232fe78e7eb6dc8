"""Each residual sum receives the output and the input of the sub-layer it closes, in a fixed order.

DeepNet (alpha * residual) is written against fairseq's contract: its layers call
``residual_connection(x, residual)`` once per sub-layer, ``x`` the output of the sub-layer that just
ran (after dropout), ``residual`` that sub-layer's input, in the order self-attention,
cross-attention (decoder, with an encoder output), FFN. The ``SublayerLayer`` schemes (ResiDual's
x^d, Admin's omega per sub-layer, B2T's connection before the last LN) write that forward
themselves and close each sub-layer with ``residual_sum(sublayer, x, residual, ...)``, named.
These tests pin both, so that a fairseq change or a slip in our forward fails here, loudly.
"""

import pytest
import torch
from helpers import TinyTask, build_model, random_batch

from fairseq_residual.schemes.base import SublayerLayer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# the module whose output each sub-layer's residual sum receives, and whose input is that sub-layer's input
SUBLAYER_MODULES = {"self_attn": ("self_attn", "self_attn"), "encoder_attn": ("encoder_attn", "encoder_attn")}
SUBLAYER_MODULES["ffn"] = ("fc2", "fc1")


def observe(layer, run, method="residual_connection"):
    """Events while ``run`` runs: each sub-layer module's (name, input, output) and each call of the
    layer's residual sum (``residual_connection(x, residual)``, or ``residual_sum(sublayer, x, residual,
    ...)`` with the sub-layer's name), in order."""
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
    inner = getattr(layer, method)

    def residual_sum(*args):
        name, (x, residual) = (args[0], args[1:3]) if method == "residual_sum" else (None, args)
        events.append(("residual_sum", x, residual, name))
        return inner(*args)

    setattr(layer, method, residual_sum)
    try:
        run()
    finally:
        delattr(layer, method)
        for h in hooks:
            h.remove()
    return events


def pairs(events):
    """(sub-layer name, its input, its output, residual_connection's x, residual) per call."""
    assert [e[0] for e in events] == ["sublayer", "residual_sum"] * (len(events) // 2), [e[0] for e in events]
    return [(s[1], s[2], s[3], r[1], r[2], r[3]) for s, r in zip(events[::2], events[1::2])]


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
    assert_sums_close_their_sublayers(calls)


def assert_sums_close_their_sublayers(calls):
    for name, sub_in, sub_out, x, residual, _ in calls:
        assert torch.equal(x, sub_out), f"{name}: x is not the sub-layer's output (dropout is 0)"
        assert torch.equal(residual, sub_in), f"{name}: residual is not the sub-layer's input (Post-LN)"


@pytest.mark.parametrize("scheme", ["residual", "admin", "b2t"])
@pytest.mark.parametrize(
    "stack,with_encoder_out,expected",
    [
        ("encoder", True, ["self_attn", "ffn"]),
        ("decoder", True, ["self_attn", "encoder_attn", "ffn"]),
        ("decoder", False, ["self_attn", "ffn"]),
    ],
)
def test_sublayer_layers_name_each_residual_sum_after_the_sublayer_that_ran(scheme, stack, with_encoder_out, expected):
    task = TinyTask()
    model = build_model(task, scheme=scheme, layers=1)
    if scheme == "admin":  # profile omega first, as fairseq-train's first batch does
        model.train()
        run_model(model, random_batch(task))
        model.eval()
    layer = getattr(model, stack).layers[0]
    assert isinstance(layer, SublayerLayer)
    calls = pairs(observe(layer, lambda: run_model(model, random_batch(task), with_encoder_out), "residual_sum"))
    assert [c[0] for c in calls] == [c[5] for c in calls] == expected
    assert_sums_close_their_sublayers(calls)
