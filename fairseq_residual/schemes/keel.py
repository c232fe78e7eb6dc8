"""Keel (Chen and Wei 2026, "Post-LayerNorm Is Back: Stable, ExpressivE, and Deep", arXiv:2601.19895v2): Post-LN
whose residual is scaled up by alpha (the "Highway-style" connection) and whose sub-layer reads a normalised
input (the extra normalisation inside the residual branch).

For every sub-layer f_k (self-attention; cross-attention in the decoder; FFN), Eq. 8:

    x_{k+1} = N^post_k(alpha * x_k + f_k(N^in_k(x_k)))       f_k's output after dropout
    alpha   = L, the number of sub-layers of the stack
    y       = x_{K+1}                                       no final norm (Post-LN)

except in the first layer of a stack (Section 3.1: "we remove the Post-LN for the very first attention layer as
well as the scaling factor alpha for both the very first attention and FFN layers"):

    x_2 = x_1 + f_1(N^in_1(x_1))                            first self-attention: no alpha, no N^post
    x_{k+1} = N^post_k(x_k + f_k(N^in_k(x_k)))              the first layer's other sub-layers: no alpha

Every norm is Eq. 9's, RMS-style with a learned gain gamma and no bias: N(x) = gamma * x / sqrt(mean(x^2) + eps).

Names: N^in_k are the layer's fairseq Pre-LN norms (``self_attn_layer_norm``, ``encoder_attn_layer_norm``,
``final_layer_norm``, run by ``SublayerEncoderLayer`` / ``SublayerDecoderLayer`` in their Pre-LN mode), replaced
by RMSNorms; N^post_k is ``post_norms[name]``; alpha is ``keel_alpha`` (1 in the first layer, where
``post_norms`` has no ``self_attn``: ``setup_position``). Weights: fairseq's init (the paper stresses that Keel
needs no special initialisation).

Choices the paper (decoder-only models) leaves open, docs/schemes.md:

* L for the encoder-decoder: each stack its own sub-layers, 2N in an N-layer encoder, 3M in an M-layer decoder with
  cross-attention (2M in a language model, the paper's case);
* "the very first" layer is each stack's first; the decoder's first cross-attention, which sits between the
  first attention and FFN layers, has no alpha either and keeps its N^post (only the attention that reads the
  embedding loses it);
* eps = 1e-5, fairseq's LayerNorm epsilon; dropout on f_k's output as in every other scheme here.
"""

from torch import nn

from .base import (
    SUBLAYER_NORMS,
    SublayerDecoderLayer,
    SublayerEncoderLayer,
    SublayerLayer,
    SublayerScheme,
    contiguous_gradient,
)
from .sandwich import sublayer_names

#: the epsilon of every norm (fairseq's LayerNorm's)
NORM_EPS = 1e-5


def keel_alpha(cfg, decoder: bool, cross_attention: bool) -> float:
    """alpha = L, the number of residual sub-layers in the stack (2 per layer, 3 with cross-attention)."""
    if decoder:
        return float((3 if cross_attention else 2) * cfg.decoder.layers)
    return float(2 * cfg.encoder.layers)


def gain_only_norm(embed_dim: int) -> nn.RMSNorm:
    """Eq. 9's norm: gamma x / sqrt(mean(x^2) + eps), gamma learned (init 1), no bias."""
    return nn.RMSNorm(embed_dim, eps=NORM_EPS)


class KeelLayer(SublayerLayer):
    """Mixin: fairseq's Pre-LN layer (N^in on each sub-layer's input) whose sums are N^post(alpha x + f)."""

    pre_norm = True

    def setup_layer(self, cfg, decoder):
        super().setup_layer(cfg, decoder)
        names = sublayer_names(self)
        for name in names:  # N^in: Eq. 9's norm in place of fairseq's LayerNorm, under fairseq's name
            setattr(self, SUBLAYER_NORMS[name], gain_only_norm(self.embed_dim))
        self.keel_alpha = keel_alpha(cfg, decoder, "encoder_attn" in names)
        self.post_norms = nn.ModuleDict({name: gain_only_norm(self.embed_dim) for name in names})

    def setup_position(self, index):
        if index == 0:  # Section 3.1
            self.keel_alpha = 1.0
            del self.post_norms["self_attn"]

    def residual_sum(self, sublayer, x, residual, block_input, stream):
        # x: f_k(N^in_k(x_k)) after dropout, residual: x_k; alpha x_k + f as one kernel, as DeepNet's
        total = x.add(residual, alpha=self.keel_alpha)
        if sublayer in self.post_norms:
            total = self.post_norms[sublayer](total)
        return total, stream


class KeelEncoderLayer(KeelLayer, SublayerEncoderLayer):
    pass


class KeelDecoderLayer(KeelLayer, SublayerDecoderLayer):
    pass


class Keel(SublayerScheme):
    name = "keel"
    summary = (
        "Keel: x_{k+1} = RMS(alpha*x_k + f_k(RMS(x_k))), alpha = sub-layers in the stack; in the first layer alpha = 1 "
        "and no outer RMS on the attention; no final norm"
    )
    normalize_before = True  # fairseq's Pre-LN wiring: N^in on each sub-layer's input; N^post is the scheme's own
    encoder_layer_cls = KeelEncoderLayer
    decoder_layer_cls = KeelDecoderLayer

    def build_stack_output(self, fairseq_default, embed_dim, cfg):
        return None  # Post-LN: the last N^post closes the stack

    def start(self, stack, x):
        """x_1 as a contiguous copy of fairseq's time-first view of the embedding: the RMS norm runs as elementwise
        kernels, which keep their input's strides, so the first sub-layer's projections would copy its strided
        output (and backward its gradient); fairseq's fused LayerNorm writes a contiguous tensor."""
        return x.contiguous()

    def finish(self, stack, carry):
        return contiguous_gradient(carry)  # the last N^post's output: elementwise kernels keep a gradient's layout
