"""DLCL: dynamic linear combination of layers (Wang, Li, Xiao, Zhu, Li, Wong, Chao 2019,
"Learning Deep Transformer Models for Machine Translation", ACL 2019, arXiv:1906.01787,
in its Pre-LN form).

Each layer is fairseq's Pre-LN layer F_l; what it reads is a learned mix of every earlier
output, y_0 being the embedding (dropout applied) and y_k = F_k(x_k):

    x_{l+1} = sum_{k=0}^{l} W[l+1, k] * LN_k(y_k)        (input of layer l+1, l = 0..N-1)
    y_{l+1} = F_{l+1}(x_{l+1})
    top     = LN_top( sum_{k=0}^{N} W[N+1, k] * LN_k(y_k) )

with W a learned lower-triangular matrix initialised to the uniform average,
W[l+1, k] = 1/(l+1), one scalar per pair (layer, earlier output). LN_0 is the identity
(the embedding is not normalised); LN_k (k >= 1) is one LayerNorm per layer output, and
LN_top is fairseq's final Pre-LN LayerNorm. Encoder and decoder each have their own W.

Names: row l+1 of W is ``history_weight`` of layer l+1 (a vector of N+1 entries, of which
the first l+1 are used; the others stay 0 and get no gradient), row N+1 is the stack-top's
``history_weight``; LN_k is ``history_norm`` of layer k.

What travels through fairseq's unchanged layer loop is each layer's own output y_l (so the
hidden states fairseq records are y_0 .. y_N, embed_dim wide, like Pre-LN's). The history
LN_0(y_0), LN_1(y_1), ... lives beside the loop, in the stack's ``LayerHistory``: hooks around
each layer's call (outside fairseq's activation checkpointing, which wraps the layer's
``forward``) record LN_l(y_l) after the layer and hand the next layer its mix; the stack-top
module does the final one. Each output is copied once into one buffer that a layer reads as
a view, so the stored history grows with N (one hidden state per layer), not with N^2 as when
every layer concatenated the whole history again.

Choices, following the authors' code (wangqiangneu/dlcl, ``history_type=learnable_dense``,
``init_value=avg``, ``weight_type=scalar``): scalar weights (not per-dimension), no softmax
normalisation of W, the embedding not layer-normalised, no dropout on the combination.

Appears in the ResiDual paper's WMT table (E6D6, E18D18).
"""

from typing import List, Optional

import torch
from fairseq.modules import LayerNorm
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import Tensor, nn

from ..errors import ConfigError
from .base import ResidualScheme, SchemeLayer, stack_layers


def combine_history(history: Tensor, weight: Tensor, embed_dim: int) -> Tensor:
    """sum_k weight[k] * history chunk k, for the k chunks of width ``embed_dim`` present."""
    chunks = history.size(-1) // embed_dim
    stacked = history.unflatten(-1, (chunks, embed_dim))
    return torch.einsum("...kc,k->...c", stacked, weight[:chunks])


def uniform_row(row: Tensor, inputs: int):
    """W[l+1, :] = 1/(l+1) over the l+1 = ``inputs`` outputs a layer reads, 0 elsewhere."""
    with torch.no_grad():
        row.zero_()
        row[:inputs] = 1.0 / inputs


class _Store(torch.autograd.Function):
    """Copies one normalised output into its slot of the history buffer.

    The buffer is outside autograd (each slot is written once and later layers write the next
    ones, which autograd's in-place checks would reject); what this returns is the entry's place
    in the graph: a zero-stride handle of the output's shape, one element of memory, through
    which ``_Combine`` sends the entry's gradient back to the output it was copied from.
    """

    @staticmethod
    def forward(ctx, output: Tensor, buffer: Tensor, index: int) -> Tensor:
        width = output.size(-1)
        buffer.narrow(-1, index * width, width).copy_(output)
        return torch.empty_strided(output.shape, (0,) * output.dim(), dtype=output.dtype, device=output.device)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


class _Combine(torch.autograd.Function):
    """``combine_history`` of the stored entries, differentiable in W and in every entry (via its handle)."""

    @staticmethod
    def forward(ctx, weight: Tensor, stored: Tensor, *handles: Tensor) -> Tensor:
        # ``stored`` is a view of the buffer: kept as it is, not through save_for_backward, whose
        # version check would fail once a later layer writes the next slot (this view's slots
        # never change)
        ctx.stored = stored
        ctx.save_for_backward(weight)
        return combine_history(stored, weight, handles[0].size(-1))

    @staticmethod
    def backward(ctx, grad):
        (weight,) = ctx.saved_tensors
        chunks = ctx.stored.size(-1) // grad.size(-1)
        grad_weight = torch.zeros_like(weight)
        grad_weight[:chunks] = torch.einsum("...kc,...c->k", ctx.stored.unflatten(-1, (chunks, grad.size(-1))), grad)
        return (grad_weight, None) + tuple(grad * weight[k] for k in range(chunks))


class LayerHistory:
    """LN_0(y_0), LN_1(y_1), ... of one stack during one forward pass, each stored once.

    The entries are written one after another into one buffer [LN_0(y_0) ; LN_1(y_1) ; ...] on
    the feature axis, allocated for all N+1 when the first one arrives; ``combine`` reads the
    entries so far as a view of it.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity  # N + 1: the embedding and every layer's output
        self.clear()

    def clear(self):
        self.buffer: Optional[Tensor] = None
        self.handles: List[Tensor] = []

    def __len__(self) -> int:
        return len(self.handles)

    def append(self, entry: Tensor):
        if self.buffer is None:
            self.buffer = entry.new_empty(*entry.shape[:-1], self.capacity * entry.size(-1))
        self.handles.append(_Store.apply(entry, self.buffer, len(self.handles)))

    def combine(self, weight: Tensor) -> Tensor:
        """sum_k weight[k] * entry k over the entries so far."""
        assert self.buffer is not None, "combine() before the first append()"
        stored = self.buffer.narrow(-1, 0, len(self.handles) * self.handles[0].size(-1))
        return _Combine.apply(weight, stored, *self.handles)

    def start(self, embedding: Tensor):
        """Record y_0 (LN_0 is the identity) if nothing is recorded yet: whichever module of the
        stack runs first (the first layer, or the top when LayerDrop skipped every layer) sees it."""
        if len(self) == 0:
            self.append(embedding)


class HistoryLayer(SchemeLayer):
    """Mixin: a fairseq Pre-LN layer with its row of W and its LN_k; ``DLCL.initialize`` hooks it
    to the stack's ``LayerHistory`` (``read_history`` before the call, ``record_output`` after)."""

    def setup_layer(self, cfg, decoder):
        num_layers = (cfg.decoder if decoder else cfg.encoder).layers
        self.history_weight = nn.Parameter(torch.zeros(num_layers + 1))  # filled by DLCL.initialize
        self.history_norm = LayerNorm(self.embed_dim, export=cfg.export)
        self.history: Optional[LayerHistory] = None  # the stack's, set by DLCL.initialize


def read_history(layer, args):
    """Forward pre-hook: the layer's input y_l is replaced by x_{l+1} = sum_k W[l+1, k] LN_k(y_k)."""
    layer.history.start(args[0])
    return (layer.history.combine(layer.history_weight),) + tuple(args[1:])


def record_output(layer, args, out):
    """Forward hook: LN_{l+1}(y_{l+1}) joins the history; y_{l+1} goes on through fairseq's loop."""
    y = out[0] if isinstance(out, tuple) else out  # decoder: (x, attn, state); encoder with return_fc: (x, fc)
    layer.history.append(layer.history_norm(y))


def clear_history(stack, args):
    """Forward pre-hook of a stack: a forward pass starts with an empty history."""
    stack.layer_history.clear()


class DLCLEncoderLayer(HistoryLayer, TransformerEncoderLayerBase):
    pass


class DLCLDecoderLayer(HistoryLayer, TransformerDecoderLayerBase):
    pass


class HistoryOutput(nn.LayerNorm):
    """Top of a DLCL stack: LN_top(sum_k W[N+1, k] LN_k(y_k)).

    A LayerNorm subclass, so its LN parameters are the stack's ``layer_norm.weight`` and
    ``layer_norm.bias`` as in fairseq's Pre-LN models; ``history_weight`` is row N+1 of W,
    sized by ``DLCL.initialize`` once the stack's depth is known.
    """

    def __init__(self, embed_dim: int):
        super().__init__(embed_dim)
        self.history_weight = nn.Parameter(torch.zeros(0))
        self.history: Optional[LayerHistory] = None  # the stack's, set by DLCL.initialize

    def reset_history_weight(self, inputs: int):
        self.history_weight = nn.Parameter(torch.zeros(inputs))
        uniform_row(self.history_weight, inputs)

    def forward(self, last_output: Tensor) -> Tensor:
        history = self.history
        assert history is not None, "DLCL.initialize gives the stack top its history"
        history.start(last_output)
        mixed = history.combine(self.history_weight)
        history.clear()  # the last reader: autograd keeps what backward needs
        return super().forward(mixed)


def refuse_sharded_layers(stack):
    """Each layer's row of W and LN_k are used outside the layer's own forward and backward (by the
    hooks and in later layers' mixes). With one worker FSDP's copy of a layer's parameters is the
    whole of them and this works; with several it holds only a shard between the layer's forward
    and backward, so writing W's rows below (a segmentation fault), or the mixes' backward, touches
    freed memory."""
    if any(getattr(stack.layers[i], "world_size", 1) > 1 for i in range(len(stack.layers))):
        raise ConfigError(
            "--residual-scheme dlcl cannot be trained with FSDP wrapping each layer on its own with several "
            "workers (--ddp-backend fully_sharded with --checkpoint-activations, or a --min-params-to-wrap "
            "below a layer's size): drop --checkpoint-activations, or use --ddp-backend c10d"
        )


class DLCL(ResidualScheme):
    name = "dlcl"
    summary = "DLCL: Pre-LN, each layer reads a learned mix of all earlier layer outputs"
    normalize_before = True
    encoder_layer_cls = DLCLEncoderLayer
    decoder_layer_cls = DLCLDecoderLayer

    def build_stack_output(self, fairseq_default, embed_dim, cfg):
        return HistoryOutput(embed_dim)

    def initialize(self, model, cfg):
        # W row by row: layer l+1 (index l) reads y_0 .. y_l, the top reads y_0 .. y_N
        for stack in (model.encoder, model.decoder):
            refuse_sharded_layers(stack)
            layers = stack_layers(stack)
            stack.layer_history = LayerHistory(len(layers) + 1)
            stack.register_forward_pre_hook(clear_history)
            for index, layer in enumerate(layers):
                uniform_row(layer.history_weight, index + 1)
                layer.history = stack.layer_history
                layer.register_forward_pre_hook(read_history)
                layer.register_forward_hook(record_output)
            stack.layer_norm.reset_history_weight(len(layers) + 1)
            stack.layer_norm.history = stack.layer_history
