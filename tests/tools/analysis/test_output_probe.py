"""The output probe's figures are what its docstring says: checked on tiny models against the same figures
written out here from independent references of the stacks (tests/reference*.py)."""

import math

import pytest
import torch
from helpers import TinyTask, build_model, random_batch
from reference import final_norm, residual_encoder_paths, source_embedding, target_embedding
from reference_baselines import decoder_sublayers, encoder_sublayers, pre_ln_stack

from fairseq_residual_tools.analysis import output_probe

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def sample_of(task, seed=0):
    """A fairseq sample: a padded source, previous target tokens and the target (their shift, pad kept)."""
    src, src_lengths, prev = random_batch(task, seed=seed)
    pad = task.target_dictionary.pad()
    target = torch.roll(prev, -1, dims=1)
    target[prev.eq(pad)] = pad
    net = {"src_tokens": src, "src_lengths": src_lengths, "prev_output_tokens": prev}
    return {"net_input": net, "target": target}


def real_positions(tokens, pad):
    """(time, batch) of every token that is not padding, of a batch-first token tensor."""
    return [(t, b) for b in range(tokens.size(0)) for t in range(tokens.size(1)) if tokens[b, t] != pad]


def written_out_rms(x, positions):
    """sqrt of the mean of the squares of every channel of every listed position of a time-first tensor."""
    squares = sum(float((x[t, b] ** 2).sum()) for t, b in positions)
    return math.sqrt(squares / (len(positions) * x.size(-1)))


def written_out_cosine(a, b, positions):
    cosines = [float(a[t, i] @ b[t, i]) / float(a[t, i].norm() * b[t, i].norm()) for t, i in positions]
    return sum(cosines) / len(cosines)


def test_a_pre_ln_models_output_rms_logit_spread_and_loss_are_the_written_out_ones():
    task = TinyTask()
    torch.manual_seed(0)
    model = build_model(task, scheme="pre", layers=2)
    sample = sample_of(task)
    pad = task.target_dictionary.pad()
    src, prev, target = sample["net_input"]["src_tokens"], sample["net_input"]["prev_output_tokens"], sample["target"]
    assert src.eq(pad).any() and target.eq(pad).any()  # padding must be left out

    measured = output_probe.output_probe(model, sample)

    with torch.no_grad():  # Pre-LN written out: x <- x + f(LN(x)) for every sub-layer, then the final LN
        enc, dec = model.encoder, model.decoder
        enc_blocks = [encoder_sublayers(layer, src.eq(pad)) for layer in enc.layers]
        y_enc = pre_ln_stack(enc, enc_blocks, source_embedding(enc, src))
        dec_blocks = [decoder_sublayers(layer, prev.eq(pad), y_enc, src.eq(pad)) for layer in dec.layers]
        y_dec = pre_ln_stack(dec, dec_blocks, target_embedding(dec, prev))
        logits = y_dec.transpose(0, 1) @ dec.embed_tokens.weight.t()  # shared output embedding
    targets = [(b, t) for t, b in real_positions(target, pad)]
    spreads, losses = [], []
    for b, t in targets:
        z = logits[b, t]
        mean = float(z.sum()) / z.numel()
        spreads.append(math.sqrt(sum((float(v) - mean) ** 2 for v in z) / z.numel()))
        losses.append(float(torch.logsumexp(z, 0)) - float(z[target[b, t]]))
    assert measured["encoder"]["rms"] == pytest.approx(written_out_rms(y_enc, real_positions(src, pad)), rel=1e-5)
    assert measured["decoder"]["rms"] == pytest.approx(written_out_rms(y_dec, real_positions(prev, pad)), rel=1e-5)
    assert measured["logit_std"] == pytest.approx(sum(spreads) / len(spreads), rel=1e-5)
    assert measured["loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-5)
    assert measured["ln_vocab"] == pytest.approx(math.log(len(task.target_dictionary)))
    assert "cos_paths" not in measured["encoder"]  # Pre-LN's output has one term
    assert 0.9 < measured["encoder"]["rms"] < 1.1  # a LayerNorm output at init: RMS about 1


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_residuals_two_output_terms_are_measured_as_written_out(scale):
    task = TinyTask()
    torch.manual_seed(0)
    model = build_model(task, scheme="residual", layers=2, residual_output_scale=scale)
    sample = sample_of(task)
    src, pad = sample["net_input"]["src_tokens"], task.source_dictionary.pad()

    measured = output_probe.output_probe(model, sample)["encoder"]

    with torch.no_grad():
        x_ln, x_d, _ = residual_encoder_paths(model, src)
        ln_dual, embedding = final_norm(model.encoder, x_d), source_embedding(model.encoder, src)
    positions = real_positions(src, pad)
    assert measured["cos_paths"] == pytest.approx(written_out_cosine(x_ln, ln_dual, positions), rel=1e-5)
    assert measured["cos_ln_embedding"] == pytest.approx(written_out_cosine(x_ln, embedding, positions), rel=1e-5)
    assert measured["cos_dual_embedding"] == pytest.approx(written_out_cosine(ln_dual, embedding, positions), rel=1e-5)
    assert measured["rms_ln"] == pytest.approx(written_out_rms(x_ln, positions), rel=1e-5)
    assert measured["rms_dual"] == pytest.approx(written_out_rms(ln_dual, positions), rel=1e-5)
    assert measured["rms"] == pytest.approx(written_out_rms(x_ln + ln_dual, positions), rel=1e-5)
    assert measured["rms_ln"] == pytest.approx(scale, rel=0.05)  # both terms start at about RMS c
