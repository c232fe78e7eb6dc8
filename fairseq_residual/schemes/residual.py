"""ResiDual / Pre-Post-LN (Xie et al. 2023, arXiv:2304.14802, Section 4).

For every sub-layer f_k (self-attention; cross-attention in the decoder; FFN):

    x^f_k      = f_k(x^ln_k)              sub-layer output after dropout
    x^a_k      = x^ln_k + x^f_k           Post-LN residual ("left" path)
    x^ln_{k+1} = LN(x^a_k)                the next sub-layer sees the Post-LN path only
    x^d_{k+1}  = x^d_k + s * x^f_k        dual ("right") path, no LayerNorm inside

    y = LN(x^a_{N+1}) + LN(x^d_{N+1})     LN(x^a_{N+1}) is x^ln_{N+1}, the last
                                          sub-layer's own Post-LN output

x^d_1 = s * x^ln_1 (the scaled input embedding after dropout), as the authors'
release does. s is ``--dual-stream-scale`` (the authors use 0.05 for OPUS-100 in
fp16, 1.0 elsewhere); LN is scale invariant, so s only changes the function
through LN's epsilon. The only new parameters are the LN on x^d, one per stack.

Names: ``x_ln`` is x^ln, ``x_dual`` is x^d. fairseq's Post-LN layer computes
x^f, x^a and x^ln itself; its ``residual_connection(x, residual)`` hook receives
exactly x^f_k, so the dual path is one line there.

Between layers the two paths travel through fairseq's unchanged layer loops as
one tensor, ``[x^ln ; x^d]`` concatenated on the feature axis (time and batch
axes stay where fairseq expects them, so masks, incremental state and beam
reordering are untouched). A tensor of width ``embed_dim`` is the plain
embedding that enters the first layer. The hidden states fairseq records
(``encoder_states``, ``inner_states``) are the x^ln halves (``ResiDual.hidden_state``).
"""

from typing import Tuple

import torch
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import Tensor, nn

from .base import ResidualScheme, SchemeLayer

#: epsilon of the LN on x^d; the authors' release uses 1e-7 so that a small
#: ``--dual-stream-scale`` does not reach the epsilon (fairseq's default is 1e-5)
DUAL_NORM_EPS = 1e-7


def unpack_streams(stream: Tensor, embed_dim: int, scale: float) -> Tuple[Tensor, Tensor]:
    """Split ``[x^ln ; x^d]`` into views (x^ln, x^d); the plain embedding starts x^d = s * x^ln_1."""
    if stream.size(-1) == embed_dim:
        return stream, stream if scale == 1.0 else stream * scale
    x_ln, x_dual = stream.split(embed_dim, dim=-1)
    return x_ln, x_dual


def pack_streams(x_ln: Tensor, x_dual: Tensor) -> Tensor:
    return torch.cat((x_ln, x_dual), dim=-1)


class DualStreamLayer(SchemeLayer):
    """Mixin that turns a fairseq Post-LN layer into a ResiDual layer.

    ``forward`` unpacks the two paths, runs fairseq's own Post-LN forward on x^ln
    (while ``residual_connection`` adds each x^f_k to x^d) and packs them again.
    """

    def setup_layer(self, cfg, decoder):
        self.dual_stream_scale = float(cfg.dual_stream_scale)
        self._x_dual = None  # x^d while this layer's forward runs; None otherwise

    def residual_connection(self, x, residual):
        # x is x^f_k (post-dropout sub-layer output); residual is x^ln_k.
        # x^d + s * x^f as one kernel (no s * x^f temporary; with s = 1 backward has no multiply)
        self._x_dual = torch.add(self._x_dual, x, alpha=self.dual_stream_scale)
        return residual + x

    def forward(self, stream, *args, **kwargs):
        x_ln, self._x_dual = unpack_streams(stream, self.embed_dim, self.dual_stream_scale)
        try:
            # x^ln as a contiguous copy, not a view of ``stream``: the q/k/v projections
            # save their input for backward, and a view would keep the whole packed
            # tensor (x^d included) alive until then; its row stride of 2 * embed_dim
            # would also turn each projection's fused addmm into mm + a bias add
            out = super().forward(x_ln.contiguous(), *args, **kwargs)
            x_dual = self._x_dual
        finally:
            self._x_dual = None
        if isinstance(out, tuple):  # decoder: (x, attn, state); encoder with return_fc: (x, fc)
            return (pack_streams(out[0], x_dual),) + tuple(out[1:])
        return pack_streams(out, x_dual)


class ResiDualEncoderLayer(DualStreamLayer, TransformerEncoderLayerBase):
    pass


class ResiDualDecoderLayer(DualStreamLayer, TransformerDecoderLayerBase):
    pass


class DualStreamOutput(nn.LayerNorm):
    """Top of a ResiDual stack: y = x^ln_{N+1} + LN(x^d_{N+1}).

    A LayerNorm subclass, so its parameters are the stack's ``layer_norm.weight``
    and ``layer_norm.bias`` as in fairseq's Pre-LN models.
    """

    def __init__(self, embed_dim: int, scale: float):
        super().__init__(embed_dim, eps=DUAL_NORM_EPS)
        self.dual_stream_scale = float(scale)

    def forward(self, stream: Tensor) -> Tensor:
        x_ln, x_dual = unpack_streams(stream, self.normalized_shape[0], self.dual_stream_scale)
        # LayerNorm copies a strided input anyway; copying first means it saves that copy
        # for backward rather than the whole packed stream
        return x_ln + super().forward(x_dual.contiguous())


class ResiDual(ResidualScheme):
    name = "residual"
    summary = "ResiDual (PPLN): Post-LN path plus an un-normalised dual path, y = x^ln + LN(x^d)"
    normalize_before = False
    encoder_layer_cls = ResiDualEncoderLayer
    decoder_layer_cls = ResiDualDecoderLayer

    def build_stack_output(self, fairseq_default, embed_dim, cfg):
        return DualStreamOutput(embed_dim, cfg.dual_stream_scale)

    def hidden_state(self, carried, embed_dim):
        """x^ln: the embedding x^ln_1, then each layer's Post-LN output x^ln_{l+1}; the last state is
        x^ln_{N+1}, not y = x^ln_{N+1} + LN(x^d_{N+1}) (that is the stack's output), as fairseq's
        Pre-LN records its last layer's output, not the final LayerNorm of it. A view, no copy."""
        return carried.narrow(-1, 0, embed_dim)
