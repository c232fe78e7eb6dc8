"""DLCL keeps each layer's normalised output once (no copy): its extra memory grows with depth, not depth squared."""

import pytest
import torch
from helpers import TinyTask, build_model, random_batch

from fairseq_residual.schemes.dlcl import mix
from fairseq_residual_tools.bench.memory import saved_for_backward_bytes

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EMBED = 16


def saved_bytes(scheme, layers, batch, task):
    torch.manual_seed(0)
    model = build_model(task, scheme=scheme, layers=layers, embed=EMBED).train()
    src, src_lengths, prev = batch
    return saved_for_backward_bytes(lambda: model(src, src_lengths, prev)[0].sum(), model.parameters())


@pytest.mark.parametrize("layers", [4, 12])
def test_dlcl_saves_about_two_hidden_states_per_layer_more_than_pre_ln(layers):
    # beyond Pre-LN, each layer's y_k (the input LN_k keeps for its backward) and LN_k(y_k) (kept by
    # the later mixes, by reference): a constant per layer. Concatenating the whole history again at
    # every layer saved (N+1)(N+2)/2 more hidden states per stack (4.9 per layer at N = 4, 9.0 at N = 12)
    task = TinyTask()
    batch = random_batch(task, src_len=8, tgt_len=8)
    hidden_state = 8 * batch[0].size(0) * EMBED * 4  # bytes of one (time, batch, embed_dim) float32 state
    extra = saved_bytes("dlcl", layers, batch, task) - saved_bytes("pre", layers, batch, task)
    per_layer = extra / hidden_state / 2 / (layers + 1)  # two stacks
    assert 1.5 < per_layer < 2.5, per_layer


def test_the_history_mix_has_autograds_gradients_of_its_sum():
    # HistoryMix writes its backward by hand (two kernels per entry): it must equal autograd's of the plain sum
    g = torch.Generator().manual_seed(0)
    history = [torch.randn(3, 2, 4, dtype=torch.double, generator=g, requires_grad=True) for _ in range(3)]
    weight = torch.randn(5, dtype=torch.double, generator=g, requires_grad=True)  # longer than the history
    assert torch.autograd.gradcheck(lambda w, *h: mix(h, w), (weight, *history))
    out = mix(history, weight)
    torch.testing.assert_close(out, sum(w * h for w, h in zip(weight, history)), atol=1e-12, rtol=0)
    grads = torch.autograd.grad(out.sum(), [weight, *history])
    assert grads[0][3:].abs().max() == 0  # the entries past the history get no gradient
