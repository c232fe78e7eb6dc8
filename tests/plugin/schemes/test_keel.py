"""Keel: x <- LN^post(alpha x + f(LN(x))), alpha = the stack's number of sub-layers, no final LayerNorm.

The model matches the reference written from the equation (reference_baselines.keel) in
test_schemes_equations.py; here: alpha per stack, the absent final LN, and a wrong variant (alpha = 1, the
plain residual) failing the check.
"""

import pytest
import torch
from helpers import TinyTask, baseline_model, build_lm, build_model, random_batch
from reference_baselines import keel

from fairseq_residual.schemes.base import stack_layers

TOL = 1e-5

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_alpha_is_the_number_of_sub_layers_of_the_stack():
    model = build_model(scheme="keel", layers=4, decoder_layers=3)
    assert {layer.keel_alpha for layer in stack_layers(model.encoder)} == {8.0}  # 2 sub-layers x 4 layers
    assert {layer.keel_alpha for layer in stack_layers(model.decoder)} == {9.0}  # 3 sub-layers x 3 layers
    lm = build_lm(scheme="keel", layers=3)
    assert {layer.keel_alpha for layer in stack_layers(lm.decoder)} == {6.0}  # no cross-attention


def test_every_sub_layer_has_its_post_norm_and_the_stacks_have_no_final_layer_norm():
    model = build_model(scheme="keel", layers=2)
    assert list(model.encoder.layers[0].post_norms) == ["self_attn", "ffn"]
    assert list(model.decoder.layers[0].post_norms) == ["self_attn", "encoder_attn", "ffn"]
    assert model.encoder.layer_norm is None and model.decoder.layer_norm is None


def test_the_equation_check_fails_with_the_plain_residual():
    task = TinyTask()
    model = baseline_model("keel", task, 2, 3)
    src, src_lengths, prev = random_batch(task)
    for layer in stack_layers(model.encoder) + stack_layers(model.decoder):
        layer.keel_alpha = 1.0  # x <- LN(x + f(LN(x))): Post-LN with an input LN, no highway scaling
    with torch.no_grad():
        logits = model(src, src_lengths, prev)[0]
        _, _, ref_logits = keel(model, src, prev)
    assert (logits - ref_logits).abs().max() > 100 * TOL
