"""Step-by-step (incremental) decoding equals the full forward pass; beam search runs."""

import pytest
import torch
from conftest import TinyTask, build_model, random_batch
from fairseq.sequence_generator import SequenceGenerator

SCHEMES = ["post", "pre", "residual"]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_incremental_decoding_equals_full_forward(scheme):
    torch.manual_seed(0)
    task = TinyTask()
    model = build_model(task, scheme=scheme, layers=3)
    src, src_lengths, prev = random_batch(task, tgt_len=6)
    prev[-1, -2:] = prev[-1, 1]  # no target padding: step-wise decoding never sees pad
    with torch.no_grad():
        full = model(src, src_lengths, prev)[0]
        enc = model.encoder(src, src_lengths=src_lengths)
        state = {}
        steps = [
            model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0] for t in range(prev.size(1))
        ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_beam_search_generates_with_fairseq_sequence_generator(scheme):
    torch.manual_seed(0)
    task = TinyTask()
    model = build_model(task, scheme=scheme, layers=2)
    src, src_lengths, _ = random_batch(task)
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=5, max_len_b=12)
    sample = {"net_input": {"src_tokens": src, "src_lengths": src_lengths}}
    hyps = generator.generate([model], sample)
    assert len(hyps) == src.size(0)
    for beams in hyps:
        assert len(beams) == 5
        assert all(h["tokens"][-1].item() == task.target_dictionary.eos() for h in beams)
        scores = [h["score"].item() for h in beams]
        assert scores == sorted(scores, reverse=True)
