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

Between layers the history travels through fairseq's unchanged layer loop as one tensor,
[LN_0(y_0) ; LN_1(y_1) ; ... ; LN_l(y_l)] on the feature axis (its width grows by the
embedding size per layer; time and batch axes stay where fairseq expects them, so masks,
incremental state and beam reordering are untouched). The stack-top module does the final
combination. Memory: the history of layer l is kept for backward, so activations grow with
N^2 instead of N (about 10x one hidden state per token at N = 18).

Choices, following the authors' code (wangqiangneu/dlcl, ``history_type=learnable_dense``,
``init_value=avg``, ``weight_type=scalar``): scalar weights (not per-dimension), no softmax
normalisation of W, the embedding not layer-normalised, no dropout on the combination.

Appears in the ResiDual paper's WMT table (E6D6, E18D18).
"""

import torch
from fairseq.modules import LayerNorm
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import Tensor, nn

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


class HistoryLayer(SchemeLayer):
    """Mixin: a fairseq Pre-LN layer reading sum_k W[l+1, k] LN_k(y_k), appending LN(y_{l+1})."""

    def setup_layer(self, cfg, decoder):
        num_layers = (cfg.decoder if decoder else cfg.encoder).layers
        self.history_weight = nn.Parameter(torch.zeros(num_layers + 1))  # filled by DLCL.initialize
        self.history_norm = LayerNorm(self.embed_dim, export=cfg.export)

    def forward(self, history, *args, **kwargs):
        x = combine_history(history, self.history_weight, self.embed_dim)
        out = super().forward(x, *args, **kwargs)
        y = out[0] if isinstance(out, tuple) else out
        history = torch.cat((history, self.history_norm(y)), dim=-1)
        if isinstance(out, tuple):  # decoder: (x, attn, state); encoder with return_fc: (x, fc)
            return (history,) + tuple(out[1:])
        return history


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

    def forward(self, history: Tensor) -> Tensor:
        mixed = combine_history(history, self.history_weight, self.normalized_shape[0])
        return super().forward(mixed)


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
            layers = stack_layers(stack)
            for index, layer in enumerate(layers):
                uniform_row(layer.history_weight, index + 1)
            stack.layer_norm.reset_history_weight(len(layers) + 1)
