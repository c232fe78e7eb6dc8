"""fairseq's options that wrap or skip layers work under every scheme.

``--checkpoint-activations`` (with and without ``--offload-activations``) recomputes each
layer in backward and must give the gradients of a plain run; ``--encoder-layerdrop`` /
``--decoder-layerdrop`` skip layers at random in training and run all of them in
evaluation. ``--ddp-backend fully_sharded`` (fairscale's FSDP) has its own tests, test_fsdp.py.
"""

import pytest
import torch
from helpers import TinyTask, build_model, loss_of, random_batch

from fairseq_residual.schemes import SCHEMES
from fairseq_residual.schemes.base import stack_layers

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def gradients(model, batch):
    model.zero_grad(set_to_none=True)
    loss_of(model, batch).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def twin(task, scheme, seed=0, **options):
    """A model in training mode, with dropout, whose weights depend only on ``seed``."""
    torch.manual_seed(seed)
    model = build_model(task, scheme=scheme, layers=3, dropout=0.1, attention_dropout=0.1, **options)
    return model.train()


@pytest.mark.parametrize("offload", [False, True], ids=["checkpoint", "checkpoint+offload"])
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_activation_checkpointing_gives_the_gradients_of_a_plain_run(scheme, offload):
    task = TinyTask()
    batch = random_batch(task)
    plain = twin(task, scheme)
    checkpointed = twin(task, scheme, checkpoint_activations=True, offload_activations=offload)
    assert all(hasattr(layer, "precheckpoint_forward") for layer in stack_layers(checkpointed.decoder))
    assert not any(hasattr(layer, "precheckpoint_forward") for layer in stack_layers(plain.decoder))
    expected, got = gradients(plain, batch), gradients(checkpointed, batch)
    assert expected.keys() == got.keys()
    for name in expected:
        if expected[name] is None:  # entries no layer reads (DLCL's unused W entries): none in both runs
            assert got[name] is None or not got[name].any(), name
            continue
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-7, msg=name)
    assert sum(float(g.abs().sum()) for g in expected.values() if g is not None) > 0


def count_layer_calls(model):
    calls = []
    for side in ("encoder", "decoder"):
        for index, layer in enumerate(stack_layers(getattr(model, side))):
            layer.register_forward_pre_hook(lambda m, args, key=(side, index): calls.append(key))
    return calls


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_layerdrop_skips_layers_in_training_and_runs_all_of_them_in_evaluation(scheme):
    task = TinyTask()
    batch = random_batch(task)
    model = twin(task, scheme, encoder_layerdrop=0.5, decoder_layerdrop=0.5)
    calls = count_layer_calls(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    runs = []
    for step in range(6):
        calls.clear()
        optimizer.zero_grad()
        loss = loss_of(model, batch, seed=step)
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss)
        runs.append(len(calls))
    assert min(runs) < 6, f"layers run per step {runs}: LayerDrop never skipped a layer"
    # evaluation runs every layer: same output as the same weights without LayerDrop
    model.eval()
    plain = build_model(task, scheme=scheme, layers=3)
    plain.load_state_dict(model.state_dict())
    calls.clear()
    with torch.no_grad():
        src, src_lengths, prev = batch
        got, expected = model(src, src_lengths, prev)[0], plain(src, src_lengths, prev)[0]
    assert len(calls) == 6
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
