"""ResiDual's encoder and decoder compute exactly the paper's PPLN equations."""

import pytest
import torch
from helpers import TinyTask, build_model, random_batch
from reference import residual_decoder, residual_encoder

from fairseq_residual.schemes import residual as residual_scheme

TOL = 1e-5


def _outputs(depth, scale, seed=0):
    torch.manual_seed(seed)
    task = TinyTask()
    model = build_model(task, scheme="residual", layers=depth, dual_stream_scale=scale)
    src, src_lengths, prev = random_batch(task, seed=seed)
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=src_lengths)["encoder_out"][0]
        logits = model(src, src_lengths, prev)[0]
        ref_enc, pad = residual_encoder(model, src, scale)
        ref_logits = residual_decoder(model, src, prev, scale)
    return enc, ref_enc, pad, logits, ref_logits


@pytest.mark.parametrize("depth", [1, 2, 6])
@pytest.mark.parametrize("scale", [1.0, 0.05])
def test_encoder_and_decoder_match_the_paper_equations(depth, scale):
    enc, ref_enc, pad, logits, ref_logits = _outputs(depth, scale)
    keep = ~pad.t()  # compare real tokens; padded positions carry no information
    assert pad.any(), "the batch must contain padding"
    torch.testing.assert_close(enc[keep], ref_enc[keep], atol=TOL, rtol=0)
    torch.testing.assert_close(logits, ref_logits, atol=TOL, rtol=0)
    assert logits.abs().max() > 0.1  # the comparison is not between two near-zero tensors


def test_dual_stream_scale_only_changes_the_function_through_ln_epsilon():
    # LN(s * x) == LN(x) up to epsilon: s = 1 and s = 0.05 give the same model output
    _, _, _, logits_1, _ = _outputs(4, 1.0, seed=3)
    _, _, _, logits_005, _ = _outputs(4, 0.05, seed=3)
    torch.testing.assert_close(logits_1, logits_005, atol=1e-4, rtol=0)


def _max_mismatch(depth=3):
    enc, ref_enc, pad, logits, ref_logits = _outputs(depth, 1.0, seed=1)
    keep = ~pad.t()
    return max((enc[keep] - ref_enc[keep]).abs().max(), (logits - ref_logits).abs().max())


def test_equation_check_fails_without_the_final_dual_layernorm(monkeypatch):
    # mutation check: y = x^ln only (drop LN(x^d)) must be caught by the comparison
    def without_dual_term(self, x_ln, x_dual):
        return x_ln

    monkeypatch.setattr(residual_scheme.DualStreamOutput, "forward", without_dual_term)
    assert _max_mismatch() > 100 * TOL


def test_equation_check_fails_without_the_dual_accumulation(monkeypatch):
    # mutation check: x^d never accumulates sub-layer outputs (stays the embedding)
    def post_ln_only(self, sublayer, x, residual, block_input, x_dual):
        return residual + x, x_dual

    monkeypatch.setattr(residual_scheme.DualStreamLayer, "residual_sum", post_ln_only)
    assert _max_mismatch() > 100 * TOL
