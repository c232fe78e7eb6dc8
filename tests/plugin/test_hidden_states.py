"""Every scheme returns embed_dim-wide hidden states with the meaning fairseq gives them.

``encoder_states`` (with ``return_all_hiddens=True``) and the decoder's ``inner_states`` hold
the embedding that enters the first layer, then what each layer hands to the next one: for
the Post-LN schemes (post, residual, deepnet, b2t, admin, tfixup) the output of the layer's
last sub-layer (for ResiDual: x^ln, never the internal [x^ln ; x^d] packing), for the Pre-LN
schemes (pre, dlcl) the layer's own output, before any stack-top LayerNorm or combination; for
Hyper-Connections (hc, mhc), whose layers hand n streams upward, their sum (what the stack-top LayerNorm reads).
"""

import pytest
import torch
from helpers import TinyTask, build_model, random_batch
from reference import source_embedding, target_embedding

from fairseq_residual.schemes import SCHEMES, get_scheme
from fairseq_residual.schemes.base import stack_layers

EMBED = 16
LAYERS = 3

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def hidden_states(model, batch):
    src, src_lengths, prev = batch
    with torch.no_grad():
        encoder_out = model.encoder(src, src_lengths=src_lengths, return_all_hiddens=True)
        features, extra = model.decoder(prev, encoder_out=encoder_out, features_only=True)
    return encoder_out, features, extra["inner_states"]


def layer_outputs(model, stack, scheme, run):
    """What each layer of ``stack`` hands upward, observed on fairseq's own modules while ``run`` runs:
    the output of the last sub-layer's LayerNorm (Post-LN) or the layer's output (Pre-LN)."""
    seen = []
    layers = stack_layers(stack)
    watched = layers if get_scheme(scheme).normalize_before else [layer.final_layer_norm for layer in layers]

    def record(module, args, out):
        out = out[0] if isinstance(out, tuple) else out  # decoder layer: (x, attn, state)
        seen.append((out.sum(dim=-2) if out.dim() == 4 else out).detach().clone())  # n streams: their sum

    hooks = [m.register_forward_hook(record) for m in watched]
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return seen


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_encoder_and_decoder_states_are_embed_dim_wide(scheme):
    task = TinyTask()
    batch = random_batch(task)
    model = build_model(task, scheme=scheme, layers=LAYERS, embed=EMBED)
    encoder_out, _, inner_states = hidden_states(model, batch)
    src, _, prev = batch
    assert [tuple(s.shape) for s in encoder_out["encoder_states"]] == [(src.size(1), src.size(0), EMBED)] * (LAYERS + 1)
    assert [tuple(s.shape) for s in inner_states] == [(prev.size(1), prev.size(0), EMBED)] * (LAYERS + 1)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_states_are_the_embedding_then_what_each_layer_hands_upward(scheme):
    torch.manual_seed(0)
    task = TinyTask()
    batch = random_batch(task)
    src, _, prev = batch
    model = build_model(task, scheme=scheme, layers=LAYERS, embed=EMBED)
    if scheme == "admin":  # omega profiled first, so that observing the run does not change it
        model.train()
        with torch.no_grad():
            model(*batch)
        model.eval()
    result = {}
    enc_seen = layer_outputs(model, model.encoder, scheme, lambda: result.update(enc=hidden_states(model, batch)))
    dec_seen = layer_outputs(model, model.decoder, scheme, lambda: result.update(dec=hidden_states(model, batch)))
    encoder_out, _, inner_states = result["dec"]
    enc_states = result["enc"][0]["encoder_states"]
    # the embedding (dropout is 0 in these models) ...
    torch.testing.assert_close(enc_states[0], source_embedding(model.encoder, src), atol=1e-6, rtol=0)
    torch.testing.assert_close(inner_states[0], target_embedding(model.decoder, prev), atol=1e-6, rtol=0)
    # ... then each layer's output, observed independently of how the scheme carries it between layers
    assert len(enc_seen) == len(dec_seen) == LAYERS
    for state, seen in zip(enc_states[1:], enc_seen):
        assert torch.equal(state, seen)
    for state, seen in zip(inner_states[1:], dec_seen):
        assert torch.equal(state, seen)


def test_residual_final_state_is_x_ln_and_the_stack_output_adds_the_normalised_dual_stream():
    # y = x^ln_{N+1} + LN(x^d_{N+1}): the last state is x^ln_{N+1}, not y
    task = TinyTask()
    batch = random_batch(task)
    model = build_model(task, scheme="residual", layers=LAYERS, embed=EMBED)
    encoder_out, _, _ = hidden_states(model, batch)
    y, last = encoder_out["encoder_out"][0], encoder_out["encoder_states"][-1]
    dual_part = y - last
    assert (dual_part - last).abs().max() > 0.1
    # LN(x^d) with the LN's initial weight 1 and bias 0: mean 0 and variance 1 at every position
    torch.testing.assert_close(dual_part.mean(-1), torch.zeros_like(dual_part.mean(-1)), atol=1e-5, rtol=0)
    torch.testing.assert_close(dual_part.var(-1, unbiased=False), torch.ones_like(dual_part[..., 0]), atol=1e-4, rtol=0)


@pytest.mark.parametrize("scheme", ["post", "pre"])
def test_post_and_pre_final_state_relates_to_the_stack_output_as_in_fairseq(scheme):
    task = TinyTask()
    model = build_model(task, scheme=scheme, layers=LAYERS, embed=EMBED)
    encoder_out, _, _ = hidden_states(model, random_batch(task))
    y, last = encoder_out["encoder_out"][0], encoder_out["encoder_states"][-1]
    expected = model.encoder.layer_norm(last) if scheme == "pre" else last
    assert torch.equal(y, expected)
