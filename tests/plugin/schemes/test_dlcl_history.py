"""DLCL keeps each layer's normalised output once: its extra memory grows with depth, not depth squared."""

import pytest
import torch
from helpers import TinyTask, build_model, random_batch

from fairseq_residual_tools.bench.memory import saved_for_backward_bytes

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EMBED = 16


def saved_bytes(scheme, layers, batch, task):
    torch.manual_seed(0)
    model = build_model(task, scheme=scheme, layers=layers, embed=EMBED).train()
    src, src_lengths, prev = batch
    return saved_for_backward_bytes(lambda: model(src, src_lengths, prev)[0].sum(), model.parameters())


@pytest.mark.parametrize("layers", [4, 12])
def test_dlcl_saves_about_one_hidden_state_per_layer_more_than_pre_ln(layers):
    # concatenating the whole history again at every layer saved (N+1)(N+2)/2 hidden states
    # per stack for backward (3.9 per layer at N = 4, 8.0 at N = 12); one buffer saves N+1
    task = TinyTask()
    batch = random_batch(task, src_len=8, tgt_len=8)
    hidden_state = 8 * batch[0].size(0) * EMBED * 4  # bytes of one (time, batch, embed_dim) float32 state
    extra = saved_bytes("dlcl", layers, batch, task) - saved_bytes("pre", layers, batch, task)
    per_layer = extra / hidden_state / 2 / (layers + 1)  # two stacks
    assert 0.5 < per_layer < 1.5, per_layer


def test_dlcl_history_is_released_after_each_forward_pass():
    task = TinyTask()
    model = build_model(task, scheme="dlcl", layers=3, embed=EMBED)
    with torch.no_grad():
        model(*random_batch(task))
    for stack in (model.encoder, model.decoder):
        assert stack.layer_history.buffer is None and len(stack.layer_history) == 0
