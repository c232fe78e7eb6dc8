"""DeepNet, B2T, Admin, T-Fixup, DLCL, Sandwich-LN, NormFormer and ResiDual with Sandwich-LN compute exactly
their papers' equations.

Each model is compared with the independent reference of ``reference_baselines.py`` on a
padded batch, for encoder and decoder depths that differ (the depth-derived constants of
DeepNet and T-Fixup use both). Learned mixing quantities (Admin's omega, DLCL's W; the LayerNorms and head
scales of the last three) are set to random values first, so that the comparison covers which value goes where.
"""

import pytest
import torch
from helpers import BASELINES, TinyTask, baseline_model, random_batch
from reference_baselines import REFERENCES

from fairseq_residual.schemes import b2t as b2t_scheme
from fairseq_residual.schemes import dlcl as dlcl_scheme
from fairseq_residual.schemes import normformer as normformer_scheme
from fairseq_residual.schemes import residual_sandwich as residual_sandwich_scheme
from fairseq_residual.schemes import sandwich as sandwich_scheme
from fairseq_residual.schemes.base import PlainSumLayer

TOL = 1e-5
DEPTHS = [(1, 1), (2, 3), (6, 4)]  # (encoder layers, decoder layers)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def outputs(scheme, enc_layers, dec_layers, seed=0):
    task = TinyTask()
    batch = random_batch(task, seed=seed)
    model = baseline_model(scheme, task, enc_layers, dec_layers, seed, batch)
    src, src_lengths, prev = batch
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=src_lengths)["encoder_out"][0]
        logits = model(src, src_lengths, prev)[0]
        ref_enc, pad, ref_logits = REFERENCES[scheme](model, src, prev)
    return enc, ref_enc, pad, logits, ref_logits


def max_mismatch(scheme, enc_layers=2, dec_layers=3):
    enc, ref_enc, pad, logits, ref_logits = outputs(scheme, enc_layers, dec_layers, seed=1)
    keep = ~pad.t()
    return max((enc[keep] - ref_enc[keep]).abs().max(), (logits - ref_logits).abs().max())


@pytest.mark.parametrize("enc_layers,dec_layers", DEPTHS)
@pytest.mark.parametrize("scheme", BASELINES)
def test_encoder_and_decoder_match_the_paper_equations(scheme, enc_layers, dec_layers):
    enc, ref_enc, pad, logits, ref_logits = outputs(scheme, enc_layers, dec_layers)
    keep = ~pad.t()  # compare real tokens; padded positions carry no information
    assert pad.any(), "the batch must contain padding"
    torch.testing.assert_close(enc[keep], ref_enc[keep], atol=TOL, rtol=0)
    torch.testing.assert_close(logits, ref_logits, atol=TOL, rtol=0)
    assert logits.abs().max() > 0.1  # the comparison is not between two near-zero tensors


@pytest.mark.parametrize("scheme", BASELINES)
def test_the_equations_hold_with_autograd_recording_too(scheme):
    # Admin sums with one addcmul without autograd and with a multiply and an add with it (formulas.py)
    task = TinyTask()
    batch = random_batch(task)
    model = baseline_model(scheme, task, 2, 3, batch=batch)
    src, src_lengths, prev = batch
    logits = model(src, src_lengths, prev)[0]
    assert logits.requires_grad
    with torch.no_grad():
        _, _, ref_logits = REFERENCES[scheme](model, src, prev)
    torch.testing.assert_close(logits.detach(), ref_logits, atol=TOL, rtol=0)


def test_equation_check_fails_without_the_bottom_to_top_connection(monkeypatch):
    def without_connection(self, sublayer, x, residual, block_input, stream):
        return residual + x, stream

    monkeypatch.setattr(b2t_scheme.BottomToTopLayer, "residual_sum", without_connection)
    assert max_mismatch("b2t") > 100 * TOL


def test_equation_check_fails_with_an_unweighted_layer_history(monkeypatch):
    def mean_of_history(history, weight):
        return torch.stack(tuple(history)).mean(0)

    monkeypatch.setattr(dlcl_scheme, "mix", mean_of_history)
    assert max_mismatch("dlcl") > 100 * TOL


def test_equation_check_fails_without_the_deepnorm_alpha():
    task = TinyTask()
    model = baseline_model("deepnet", task, 2, 3)
    src, src_lengths, prev = random_batch(task)
    for layer in list(model.encoder.layers) + list(model.decoder.layers):
        layer.deepnorm_alpha = 1.0  # plain Post-LN wiring, DeepNet's init kept
    with torch.no_grad():
        logits = model(src, src_lengths, prev)[0]
        _, _, ref_logits = REFERENCES["deepnet"](model, src, prev)
    assert (logits - ref_logits).abs().max() > 100 * TOL


def test_equation_check_fails_without_admin_omega():
    task = TinyTask()
    model = baseline_model("admin", task, 2, 3)
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        _, _, ref_logits = REFERENCES["admin"](model, src, prev)
        for name, p in model.named_parameters():
            if name.endswith("_omega_delta"):
                p.zero_()
        for name, b in model.named_buffers():
            if name.endswith("_omega0"):
                b.fill_(1.0)
        logits = model(src, src_lengths, prev)[0]
    assert (logits - ref_logits).abs().max() > 100 * TOL


def test_equation_check_fails_without_the_sandwich_output_norms(monkeypatch):
    # Pre-LN's plain sum x_k + f_k where Sandwich-LN adds LN^out(f_k)
    monkeypatch.setattr(sandwich_scheme.SandwichNormLayer, "residual_sum", PlainSumLayer.residual_sum)
    assert max_mismatch("sandwich") > 100 * TOL


def test_equation_check_tells_the_papers_head_scaling_from_scaling_the_projected_output(monkeypatch):
    # fairseq's --scale-heads scales the d_h-wide slices of the output after W^O: rows of W^O, not its columns
    def after_output_projection(self, weight):
        return weight.unflatten(0, (-1, self.head_dim)).mul(self.gamma[:, None, None]).flatten(0, 1)

    monkeypatch.setattr(normformer_scheme.HeadScale, "forward", after_output_projection)
    assert max_mismatch("normformer") > 100 * TOL


def test_equation_check_fails_when_the_dual_path_receives_the_unnormalised_output(monkeypatch):
    def raw_output_to_dual(self, sublayer, x, residual, block_input, x_dual):
        return residual + self.sublayer_output_norms[sublayer](x), x_dual + x

    monkeypatch.setattr(residual_sandwich_scheme.ResiDualSandwichLayer, "residual_sum", raw_output_to_dual)
    assert max_mismatch("residual-sandwich") > 100 * TOL
