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

Where the history lives during a forward pass: the stack's layer loop carries
(y_l, history) in a local, history being the tuple LN_0(y_0), LN_1(y_1), ... (``DLCL.step``).
A layer receives the history entries as its positional arguments (tensors, so that fairseq's
activation checkpointing saves and recomputes them like any input, and FSDP has gathered the
layer's W row and LN_k when they are used), mixes them, runs fairseq's Pre-LN layer and
returns y_{l+1} and LN_{l+1}(y_{l+1}). The mix is a chain of multiply-adds (``mix``):
autograd keeps a reference to each entry, never a copy, so the stored history grows with N
(two hidden states per layer: y_k kept by LN_k, LN_k(y_k) by the mixes), not with N^2 as when
every layer concatenated the whole history again. The hidden states fairseq records are
y_0 .. y_N, like Pre-LN's.

Choices, following the authors' code (wangqiangneu/dlcl, ``history_type=learnable_dense``,
``init_value=avg``, ``weight_type=scalar``): scalar weights (not per-dimension), no softmax
normalisation of W, the embedding not layer-normalised, no dropout on the combination.

Appears in the ResiDual paper's WMT table (E6D6, E18D18).
"""

from typing import Sequence

import torch
from fairseq.modules import LayerNorm
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import Tensor, nn

from ..errors import ConfigError
from .base import ResidualScheme, SchemeLayer, split_layer_output, stack_layers


def mix(history: Sequence[Tensor], weight: Tensor) -> Tensor:
    """sum_k weight[k] * history[k] over the entries present (weight may be longer): weight[k] a scalar (DLCL's W)
    or one per token, (time, batch, 1) (Attention Residuals' softmax over depth)."""
    if torch.is_grad_enabled():
        return HistoryMix.apply(weight[: len(history)], *history)
    return HistoryMix.forward(weight, *history)  # the same chain; dynamo traces it into the caller's graph


class HistoryMix(torch.autograd.Function):
    """out = sum_k w[k] * h_k as a chain of multiply-adds (one kernel per entry), whose backward is the
    two products the chain rule asks per entry: dL/dh_k = w[k] * g and dL/dw[k] = <g, h_k> (over everything for a
    scalar w[k], one dot product; token by token for per-token weights, one batched product).

    Autograd's own backward of the same chain of ``addcmul`` runs five kernels per entry: it multiplies by
    addcmul's ``value`` (1) twice and takes each dot product as a product plus a sum; the weights indexed one
    by one also cost a zero-filled vector per entry and the sums of those. Here: two kernels per entry, and
    one ``stack`` of the w[k] gradients per mix.
    """

    @staticmethod
    def forward(weight: Tensor, *history: Tensor) -> Tensor:
        out = history[0] * weight[0]
        for k in range(1, len(history)):
            out = torch.addcmul(out, history[k], weight[k])
        return out

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)  # the weights and the entries (kept by reference, as the chain's were)

    @staticmethod
    def backward(ctx, grad: Tensor):
        weight, *history = ctx.saved_tensors
        if weight.dim() == 1:
            flat = grad.reshape(-1)
            grad_weight = torch.stack([torch.dot(flat, h.reshape(-1)) for h in history])
        else:  # (entries, time, batch, 1): <g, h_k> over the width, for every token: a batch of 1 x 1 products
            width = grad.size(-1)
            rows = grad.reshape(-1, 1, width)
            grad_weight = torch.stack([torch.bmm(rows, h.reshape(-1, width, 1)).view_as(weight[0]) for h in history])
        return (grad_weight, *(grad * weight[k] for k in range(len(history))))


def uniform_row(row: Tensor, inputs: int):
    """W[l+1, :] = 1/(l+1) over the l+1 = ``inputs`` outputs a layer reads, 0 elsewhere."""
    with torch.no_grad():
        row.zero_()
        row[:inputs] = 1.0 / inputs


class HistoryLayer(SchemeLayer):
    """Mixin: a fairseq Pre-LN layer F_{l+1} with its row of W and its LN_{l+1}.

    ``forward(*history, **fairseq_kwargs)`` -> fairseq's outputs with y_{l+1} first, then
    LN_{l+1}(y_{l+1}) appended last.
    """

    def setup_layer(self, cfg, decoder):
        num_layers = (cfg.decoder if decoder else cfg.encoder).layers
        self.history_weight = nn.Parameter(torch.zeros(num_layers + 1))  # filled by DLCL.initialize
        self.history_norm = LayerNorm(self.embed_dim, export=cfg.export)

    def forward(self, *history: Tensor, **kwargs):
        # super(): the fairseq layer class this mixin precedes in the bases
        y, rest = split_layer_output(super().forward(mix(history, self.history_weight), **kwargs))
        return (y,) + rest + (self.history_norm(y),)


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

    def reset_history_weight(self, inputs: int):
        self.history_weight = nn.Parameter(torch.zeros(inputs))
        uniform_row(self.history_weight, inputs)

    def forward(self, history: Sequence[Tensor]) -> Tensor:  # type: ignore[override]
        return super().forward(mix(history, self.history_weight))


def refuse_sharded_layers(stack):
    """With several workers FSDP holds only a shard of a layer's parameters outside the layer's
    call, so writing W's rows below touches freed memory (a segmentation fault)."""
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

    def start(self, stack, x):
        """(y_0, history) with y_0 the embedding and LN_0 the identity.

        y_0 as a contiguous copy of fairseq's time-first view of the embedding: every mix's backward then takes
        its dot product with y_0 on a flat view (one copy here, instead of one in each of the N+1 mixes)."""
        x = x.contiguous()
        return x, (x,)

    def step(self, layer, carry, **kwargs):
        """x_{l+1} = sum_k W[l+1, k] LN_k(y_k); y_{l+1} = F_{l+1}(x_{l+1}); LN_{l+1}(y_{l+1}) joins the history."""
        history = carry[1]
        out = layer(*history, **kwargs)
        return (out[0], history + (out[-1],)), out[1:-1]

    def hidden_state(self, carry):
        return carry[0]

    def finish(self, stack, carry):
        return stack.layer_norm(carry[1])

    def initialize(self, model, cfg):
        # W row by row: layer l+1 (index l) reads y_0 .. y_l, the top reads y_0 .. y_N
        for stack in (model.encoder, model.decoder):
            refuse_sharded_layers(stack)
            layers = stack_layers(stack)
            for index, layer in enumerate(layers):
                uniform_row(layer.history_weight, index + 1)
            stack.layer_norm.reset_history_weight(len(layers) + 1)
