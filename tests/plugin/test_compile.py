"""Every scheme under ``torch.compile``: the compiled model gives eager's loss and gradients, and
dynamo breaks its eval forward into no more graphs than fairseq's stock transformer of the same size.

``aot_eager`` is the autograd stage that inductor uses, without inductor's code generation (which
is for GPUs here; FACTS.md). On 7c223e8 DLCL's backward raised (its history buffer was written
in place outside autograd) and ResiDual's and DLCL's eval forwards broke into more graphs than
stock's.
"""

import pytest
import torch
from fairseq.models.transformer import TransformerModel, base_architecture
from helpers import TinyTask, baseline_model, loss_of, model_args, random_batch

from fairseq_residual.schemes import SCHEMES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: two encoder layers (a carry handed from layer to layer, LayerNorm Scaling's second factor), one decoder layer (the
#: decoder's three sub-layers): every code path of the schemes at 7 sub-layers, where 2 + 2 layers traced 10
ENCODER_LAYERS, DECODER_LAYERS = 2, 1


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def loss_and_gradients(run, model, batch):
    """The loss of ``run`` (the model or its compiled form) and the gradients it leaves on ``model``'s parameters."""
    model.zero_grad(set_to_none=True)
    loss = loss_of(run, batch)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_compiled_model_gives_eager_loss_and_gradients_in_training_and_in_eval(scheme):
    task = TinyTask()
    batch = random_batch(task)
    model = baseline_model(scheme, task, ENCODER_LAYERS, DECODER_LAYERS, batch=batch)  # dropout 0; Admin profiled
    compiled = torch.compile(model, backend="aot_eager")
    for training in (True, False):
        model.train(training)
        eager_loss, eager_grads = loss_and_gradients(model, model, batch)
        loss, grads = loss_and_gradients(compiled, model, batch)
        assert abs(float(loss) - float(eager_loss)) <= 1e-6, (training, float(loss), float(eager_loss))
        assert grads.keys() == eager_grads.keys() and grads
        worst = max(float((grads[n] - eager_grads[n]).abs().max()) for n in grads)
        assert worst <= 1e-6, (training, worst)


def stock_transformer(task):
    args = model_args(scheme="post", layers=ENCODER_LAYERS, decoder_layers=DECODER_LAYERS)
    del args.residual_scheme
    base_architecture(args)
    return TransformerModel.build_model(args, task).eval()


def graph_breaks(model, batch):
    torch._dynamo.reset()
    with torch.no_grad():
        return torch._dynamo.explain(model)(*batch).graph_break_count


@pytest.fixture(scope="module")
def stock_graph_breaks():
    """The stock transformer's count on the tests' task and batch (seeded: the same for every scheme's test)."""
    task = TinyTask()
    count = graph_breaks(stock_transformer(task), random_batch(task))
    torch._dynamo.reset()
    return count


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_eval_forward_breaks_into_no_more_graphs_than_fairseq_stock_transformer(scheme, stock_graph_breaks):
    task = TinyTask()
    batch = random_batch(task)
    assert stock_graph_breaks > 0  # fairseq's own data-dependent branches (padding masks) break the graph
    assert (
        graph_breaks(baseline_model(scheme, task, ENCODER_LAYERS, DECODER_LAYERS, batch=batch), batch)
        <= stock_graph_breaks
    )
