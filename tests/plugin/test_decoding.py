"""Every registered scheme decodes step by step exactly as it scores a whole sequence, and
fairseq's beam search runs on it."""

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from helpers import TinyTask, baseline_model, random_batch

from fairseq_residual.schemes import SCHEMES

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_incremental_decoding_equals_full_forward(scheme):
    task = TinyTask()
    src, src_lengths, prev = random_batch(task, tgt_len=6)
    prev[-1, -2:] = prev[-1, 1]  # no target padding: step-wise decoding never sees pad
    model = baseline_model(scheme, task, 2, 3, batch=(src, src_lengths, prev))
    with torch.no_grad():
        full = model(src, src_lengths, prev)[0]
        enc = model.encoder(src, src_lengths=src_lengths)
        state = {}
        steps = [
            model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0] for t in range(prev.size(1))
        ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_beam_search_generates_with_fairseq_sequence_generator(scheme):
    task = TinyTask()
    model = baseline_model(scheme, task, 2, 2)
    src, src_lengths, _ = random_batch(task)
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=5, max_len_b=12)
    hyps = generator.generate([model], {"net_input": {"src_tokens": src, "src_lengths": src_lengths}})
    assert len(hyps) == src.size(0)
    for beams in hyps:
        assert len(beams) == 5
        assert all(h["tokens"][-1].item() == task.target_dictionary.eos() for h in beams)
        scores = [h["score"].item() for h in beams]
        assert all(torch.isfinite(h["score"]) for h in beams)
        assert scores == sorted(scores, reverse=True)
