"""LayerNorm Scaling: Pre-LN whose LayerNorm outputs in layer l are scaled by 1/sqrt(l), the final LN unscaled.

The model matches the reference written from the paper's equation (reference_baselines.ln_scaling, which
computes each LN from its parameters) in test_schemes_equations.py; here: the factors themselves, the exact
identity with Pre-LN when every factor is 1, and a wrong variant (l counted from 0 + 1 = 2) failing the check.
"""

import math

import pytest
import torch
from helpers import TinyTask, baseline_model, build_lm, build_model, random_batch
from reference_baselines import ln_scaling

from fairseq_residual.model import SCHEME_KEY
from fairseq_residual.schemes import ln_scaling as ln_scaling_scheme
from fairseq_residual.schemes.base import stack_layers

TOL = 1e-5

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def scales(stack, name):
    return [getattr(layer, name).scale for layer in stack_layers(stack)]


def test_every_layer_norm_of_layer_l_is_scaled_by_one_over_sqrt_l_and_the_final_one_is_not():
    model = build_model(scheme="ln-scaling", layers=4, decoder_layers=3)
    expected_encoder = [1 / math.sqrt(n) for n in (1, 2, 3, 4)]
    expected_decoder = [1 / math.sqrt(n) for n in (1, 2, 3)]  # each stack counts its own layers from 1
    assert scales(model.encoder, "self_attn_layer_norm") == expected_encoder
    assert scales(model.encoder, "final_layer_norm") == expected_encoder
    for name in ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"):
        assert scales(model.decoder, name) == expected_decoder
    for stack in (model.encoder, model.decoder):
        assert type(stack.layer_norm) is torch.nn.LayerNorm  # the final LN: fairseq's, not scaled


def test_a_language_model_scales_its_two_layer_norms_per_layer():
    lm = build_lm(scheme="ln-scaling", layers=3)
    for name in ("self_attn_layer_norm", "final_layer_norm"):
        assert scales(lm.decoder, name) == [1 / math.sqrt(n) for n in (1, 2, 3)]


def test_with_every_factor_one_it_is_pre_ln_exactly_and_has_pre_lns_parameters():
    task = TinyTask()
    scaled = build_model(task, scheme="ln-scaling", layers=3)
    pre = build_model(task, scheme="pre", layers=3)
    state = dict(scaled.state_dict(), **{SCHEME_KEY: getattr(pre, SCHEME_KEY)})
    pre.load_state_dict(state, strict=True)  # the same parameter names: nothing added, nothing left over
    for stack in (scaled.encoder, scaled.decoder):
        for layer in stack_layers(stack):
            for name in ln_scaling_scheme.LAYER_NORMS:
                if getattr(layer, name, None) is not None:
                    getattr(layer, name).scale = 1.0
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        assert torch.equal(scaled(src, src_lengths, prev)[0], pre(src, src_lengths, prev)[0])


def test_the_equation_check_fails_with_the_layer_counted_from_two(monkeypatch):
    monkeypatch.setattr(ln_scaling_scheme, "depth_scale", lambda number: 1 / math.sqrt(number + 1))
    task = TinyTask()
    model = baseline_model("ln-scaling", task, 2, 3)
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        logits = model(src, src_lengths, prev)[0]
        _, _, ref_logits = ln_scaling(model, src, prev)
    assert (logits - ref_logits).abs().max() > 100 * TOL
