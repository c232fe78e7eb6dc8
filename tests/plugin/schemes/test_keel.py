"""Keel as its paper writes it (Eq. 8 and 9, Section 3.1): x <- RMS^post(alpha x + f(RMS^in(x))), alpha = the stack's
number of sub-layers, in each stack's first layer alpha = 1 and no RMS^post after the self-attention; every norm
gain-only RMS; no final norm.

The model matches the reference written from the paper (reference_baselines.keel) in test_schemes_equations.py;
here: alpha per stack and layer, which norms exist (also with every layer wrapped), and the comparison failing for
the three ways the earlier ``keel`` differed from the paper (alpha and RMS^post in the first layer, LayerNorm with a
bias) and for the plain residual.
"""

import pytest
import torch
from helpers import TinyTask, baseline_model, build_lm, build_model, random_batch
from reference_baselines import keel
from torch import nn

from fairseq_residual.schemes import keel as keel_scheme
from fairseq_residual.schemes.base import SchemeLayer, stack_layers

TOL = 1e-5

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def max_mismatch(model, batch):
    src, src_lengths, prev = batch
    with torch.no_grad():
        logits = model(src, src_lengths, prev)[0]
        _, _, ref_logits = keel(model, src, prev)
    return (logits - ref_logits).abs().max()


def test_alpha_is_the_number_of_sub_layers_of_the_stack_and_1_in_its_first_layer():
    model = build_model(scheme="keel", layers=4, decoder_layers=3)
    assert [layer.keel_alpha for layer in stack_layers(model.encoder)] == [1.0, 8.0, 8.0, 8.0]  # 2 x 4 sub-layers
    assert [layer.keel_alpha for layer in stack_layers(model.decoder)] == [1.0, 9.0, 9.0]  # 3 x 3
    lm = build_lm(scheme="keel", layers=3)
    assert [layer.keel_alpha for layer in stack_layers(lm.decoder)] == [1.0, 6.0, 6.0]  # no cross-attention


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "each-layer-wrapped"])
def test_the_first_attention_has_no_post_norm_and_the_stacks_no_final_norm(wrapped):
    # --checkpoint-activations wraps every layer: its modules are settled before the wrapping
    model = build_model(scheme="keel", layers=2, checkpoint_activations=wrapped)
    encoder, decoder = stack_layers(model.encoder), stack_layers(model.decoder)
    assert [list(layer.post_norms) for layer in encoder] == [["ffn"], ["self_attn", "ffn"]]
    assert [list(layer.post_norms) for layer in decoder] == [
        ["encoder_attn", "ffn"],
        ["self_attn", "encoder_attn", "ffn"],
    ]
    assert model.encoder.layer_norm is None and model.decoder.layer_norm is None


def test_every_norm_is_gain_only_rms():
    model = build_model(scheme="keel", layers=2)
    layers = stack_layers(model.encoder) + stack_layers(model.decoder)
    norms = [m for layer in layers for m in layer.modules() if isinstance(m, (nn.LayerNorm, nn.RMSNorm))]
    assert len(norms) == (4 + 3) + (6 + 5)  # N^in of every sub-layer, N^post of all but the first attention
    assert all(isinstance(m, nn.RMSNorm) and m.eps == 1e-5 for m in norms)
    assert [name for name, _ in model.named_parameters() if "norm" in name and not name.endswith(".weight")] == []


def paper_model(seed=0):
    task = TinyTask()
    return task, baseline_model("keel", task, 2, 3, seed=seed)  # norms' gains randomised


def test_the_equation_check_fails_with_the_plain_residual():
    task, model = paper_model()
    for layer in stack_layers(model.encoder) + stack_layers(model.decoder):
        layer.keel_alpha = 1.0  # x <- RMS(x + f(RMS(x))): Post-LN with an input norm, no highway scaling
    assert max_mismatch(model, random_batch(task)) > 100 * TOL


def test_the_equation_check_fails_with_alpha_and_the_post_norm_in_the_first_layer(monkeypatch):
    # the earlier keel: every layer alike, the first one's sums scaled by alpha and its attention post-normalised
    monkeypatch.setattr(keel_scheme.KeelLayer, "setup_position", SchemeLayer.setup_position)
    task, model = paper_model()
    assert [list(layer.post_norms)[0] for layer in stack_layers(model.encoder)] == ["self_attn"] * 2
    assert max_mismatch(model, random_batch(task)) > 100 * TOL


def test_the_equation_check_fails_with_layer_norms_that_have_a_bias(monkeypatch):
    monkeypatch.setattr(keel_scheme, "gain_only_norm", nn.LayerNorm)
    task, model = paper_model()  # their biases randomised with the gains
    assert max_mismatch(model, random_batch(task)) > 100 * TOL
