"""SiameseNorm: ResiDual's two streams, each sub-layer reading LN^in(x^ln + LN^y(x^d)) and adding f/c to the
Post-LN path, the stack output LN^out(x^ln + LN^d(x^d)).

The model matches the reference written from the authors' Block (reference_baselines.siamese) in
test_schemes_equations.py; here: the depth factor per stack and layer (also with every layer wrapped), the output
normalised at initialisation, --dual-stream-scale changing the function only through LayerNorm epsilons, and the
comparison failing without the depth factor, with sub-layers that read x^ln alone, and with x^d joining unnormalised.
"""

import math

import pytest
import torch
from helpers import TinyTask, baseline_model, build_lm, build_model, random_batch
from reference_baselines import siamese

from fairseq_residual.schemes import siamese as siamese_scheme
from fairseq_residual.schemes.base import SublayerLayer, stack_layers

TOL = 1e-5

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def outputs(model, batch, scale=1.0):
    src, src_lengths, prev = batch
    with torch.no_grad():
        return model(src, src_lengths, prev)[0], siamese(model, src, prev, scale=scale)[2]


def max_mismatch(model, batch, scale=1.0):
    logits, ref_logits = outputs(model, batch, scale)
    return (logits - ref_logits).abs().max()


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "each-layer-wrapped"])
def test_the_depth_factor_is_the_root_of_the_sub_layers_up_to_the_end_of_the_layer(wrapped):
    # the authors' c = sqrt(2 (l + 1)) for two sub-layers a layer; 3 (l + 1) with cross-attention
    model = build_model(scheme="siamese", layers=3, decoder_layers=2, checkpoint_activations=wrapped)
    assert [layer.depth_factor for layer in stack_layers(model.encoder)] == [math.sqrt(k) for k in (2, 4, 6)]
    assert [layer.depth_factor for layer in stack_layers(model.decoder)] == [math.sqrt(k) for k in (3, 6)]
    lm = build_lm(scheme="siamese", layers=3)
    assert [layer.depth_factor for layer in stack_layers(lm.decoder)] == [math.sqrt(k) for k in (2, 4, 6)]


def test_every_sub_layer_has_both_norms_and_the_stack_top_three():
    model = build_model(scheme="siamese", layers=2)
    decoder_layer = stack_layers(model.decoder)[0]
    assert list(decoder_layer.stream_norms) == list(decoder_layer.input_norms) == ["self_attn", "encoder_attn", "ffn"]
    names = {name for name, _ in model.encoder.layer_norm.named_parameters()}  # LN^d's own, LN_0, LN^out
    assert names == {f"{norm}{p}" for norm in ("", "embedding_norm.", "output_norm.") for p in ("weight", "bias")}


def test_the_stack_output_starts_normalised():
    # LN^out with gain 1 and bias 0: every position has mean 0 and variance 1 (ResiDual's output starts near 2 x^ln)
    task = TinyTask()
    model = build_model(task, scheme="siamese", layers=3)
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        encoder_out = model.encoder(src, src_lengths=src_lengths)["encoder_out"][0]
        features = model.decoder(prev, encoder_out=model.encoder(src, src_lengths=src_lengths), features_only=True)[0]
    for y in (encoder_out, features):
        torch.testing.assert_close(y.mean(-1), torch.zeros_like(y[..., 0]), atol=1e-5, rtol=0)
        torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones_like(y[..., 0]), atol=1e-3, rtol=0)


def test_the_dual_stream_scale_changes_the_function_only_through_layer_norm_epsilons():
    task = TinyTask()
    batch = random_batch(task)
    plain = baseline_model("siamese", task, 2, 3)
    scaled = baseline_model("siamese", task, 2, 3, dual_stream_scale=0.5)
    scaled.load_state_dict(plain.state_dict())
    assert max_mismatch(scaled, batch, scale=0.5) <= TOL
    torch.testing.assert_close(outputs(scaled, batch)[0], outputs(plain, batch)[0], atol=1e-4, rtol=0)


def paper_model():
    task = TinyTask()
    return task, baseline_model("siamese", task, 2, 3)  # every LayerNorm's gain and bias randomised


def test_the_equation_check_fails_without_the_depth_factor():
    task, model = paper_model()
    for layer in stack_layers(model.encoder) + stack_layers(model.decoder):
        layer.depth_factor = 1.0
    assert max_mismatch(model, random_batch(task)) > 100 * TOL


def test_the_equation_check_fails_when_sub_layers_read_the_post_ln_path_alone(monkeypatch):
    monkeypatch.setattr(siamese_scheme.SiameseLayer, "sublayer_input", SublayerLayer.sublayer_input)  # ResiDual's
    task, model = paper_model()
    assert max_mismatch(model, random_batch(task)) > 100 * TOL


def test_the_equation_check_fails_when_the_accumulating_stream_joins_unnormalised(monkeypatch):
    def raw_stream(self, sublayer, x, x_dual):
        return self.input_norms[sublayer](x + x_dual), x_dual

    monkeypatch.setattr(siamese_scheme.SiameseLayer, "sublayer_input", raw_stream)
    task, model = paper_model()
    assert max_mismatch(model, random_batch(task)) > 100 * TOL
