"""A forward pass makes no tensor on the CPU when its model and inputs are elsewhere.

On a GPU, a tensor made on the host and moved with ``.to(x)`` is a blocking host-to-device copy in
every step (the decoder's causal mask was one). The model runs here on the ``meta`` device: every
aten operation is seen by a dispatch mode, which records each one that returns a CPU tensor of more
than a few elements or copies such a tensor to another device. ``meta`` tensors hold no data, so the
mode answers the forward's data-dependent branches itself (``bool(mask.any())``: "there is padding").
"""

import pytest
import torch
from helpers import TinyTask, baseline_model, random_batch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from fairseq_residual.schemes import SCHEMES

#: a CPU tensor this small is a shape or a flag (fairseq's positional embedding takes the input's
#: shape as a 2-element tensor), not data worth a transfer
FEW = 4


def _tensors(tree):
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class HostTensors(TorchDispatchMode):
    """Records (operation, shape) of every CPU tensor of more than FEW elements that an operation returns,
    or moves to another device; answers the scalar reads of ``meta`` tensors."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
            return True if args[0].dtype == torch.bool else 1
        out = func(*args, **kwargs)
        outputs = _tensors(out)
        for t in outputs:
            if t.device.type == "cpu" and t.numel() > FEW:
                self.seen.append((str(func), tuple(t.shape)))
        if any(t.device.type != "cpu" for t in outputs):
            for t in _tensors((args, kwargs)):
                if t.device.type == "cpu" and t.numel() > FEW:
                    self.seen.append((f"{func} from the CPU", tuple(t.shape)))
        return out


def forward(model, batch, mode):
    src, src_lengths, prev = batch
    model.train(mode == "train")
    if mode == "train":
        model(src, src_lengths, prev)[0].float().sum().backward()
        return
    with torch.no_grad():
        if mode == "eval":
            model(src, src_lengths, prev)
            return
        encoder_out = model.encoder(src, src_lengths=src_lengths)
        state = {}
        for t in range(prev.size(1)):
            model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
        order = torch.arange(src.size(0) - 1, -1, -1, device=src.device)  # a beam search reorders the state
        model.decoder.reorder_incremental_state_scripting(state, order)
        model.decoder(prev, encoder_out=model.encoder.reorder_encoder_out(encoder_out, order), incremental_state=state)


@pytest.mark.parametrize("mode", ["train", "eval", "incremental"])
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_no_forward_pass_makes_a_host_tensor_when_model_and_inputs_are_elsewhere(scheme, mode):
    task = TinyTask()
    batch = random_batch(task)
    model = baseline_model(scheme, task, 2, 2, batch=batch).to("meta")  # Admin: profiled on CPU first
    batch = [t.to("meta") for t in batch]
    with HostTensors():  # a first call may move fairseq's lazily grown tables; a step must not
        forward(model, batch, mode)
    with HostTensors() as mode_record:
        forward(model, batch, mode)
    assert mode_record.seen == []


def test_the_recorder_sees_a_mask_made_on_the_host_and_moved():
    x = torch.empty(6, 2, 8, device="meta")
    with HostTensors() as mode_record:
        torch.triu(torch.full((6, 6), float("-inf")), 1).to(x)
    assert ("aten.triu.default", (6, 6)) in mode_record.seen
    assert any(op.endswith("from the CPU") for op, _ in mode_record.seen)
