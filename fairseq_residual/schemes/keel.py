"""Keel (Chen and Wei 2026, "Post-LayerNorm Is Back: Stable, ExpressivE, and Deep", arXiv:2601.19895):
Post-LN whose residual is scaled up by alpha (the "Highway-style" connection) and whose sub-layer reads a
normalised input (the extra LayerNorm inside the residual branch).

For every sub-layer f_k (self-attention; cross-attention in the decoder; FFN):

    x_{k+1} = LN^post_k(alpha * x_k + f_k(LN^in_k(x_k)))        f_k's output after dropout
    alpha   = L, the number of sub-layers of the stack
    y       = x_{K+1}                                          no final LayerNorm (Post-LN)

LN^in_k is fairseq's Pre-LN LayerNorm of the sub-layer (``self_attn_layer_norm``, ``encoder_attn_layer_norm``,
``final_layer_norm``, run by ``SublayerEncoderLayer`` / ``SublayerDecoderLayer`` in their Pre-LN mode); LN^post_k
is new, one per sub-layer (``post_norms[name]``), fairseq's LayerNorm init. Weights: fairseq's init (the paper
stresses that Keel needs no special initialisation).

Source, and what is not verified: the paper's own text could not be read here (the search tool returns its
abstract only). The equation and alpha = L (L counting sub-layers, attention and FFN each one) are taken from
public summaries of the paper and from third-party implementations that cite it; docs/schemes.md lists each of
these choices as unverified:

* alpha = L, with L the sub-layers of the stack the layer is in: 2N in an N-layer encoder, 3M in an M-layer
  decoder with cross-attention, 2M in a language model (the paper trains decoder-only models);
* alpha is a constant, not learned, the same for every sub-layer, the first layer's included (the embedding
  enters as x_1 unnormalised, scaled by alpha like any other residual);
* dropout on f_k's output as in every other scheme here; no final LayerNorm beyond the last LN^post.
"""

import torch
from fairseq.modules import LayerNorm
from torch import nn

from .base import SublayerDecoderLayer, SublayerEncoderLayer, SublayerLayer, SublayerScheme
from .sandwich import sublayer_names


def keel_alpha(cfg, decoder: bool, cross_attention: bool) -> float:
    """alpha = L, the number of residual sub-layers in the stack (2 per layer, 3 with cross-attention)."""
    if decoder:
        return float((3 if cross_attention else 2) * cfg.decoder.layers)
    return float(2 * cfg.encoder.layers)


class KeelLayer(SublayerLayer):
    """Mixin: fairseq's Pre-LN layer (LN^in on each sub-layer's input) whose sums are LN^post(alpha x + f)."""

    pre_norm = True

    def setup_layer(self, cfg, decoder):
        super().setup_layer(cfg, decoder)
        self.keel_alpha = keel_alpha(cfg, decoder, getattr(self, "encoder_attn", None) is not None)
        self.post_norms = nn.ModuleDict(
            {name: LayerNorm(self.embed_dim, export=cfg.export) for name in sublayer_names(self)}
        )

    def residual_sum(self, sublayer, x, residual, block_input, stream):
        # x: f_k(LN^in_k(x_k)) after dropout, residual: x_k; one kernel for the sum, as DeepNet's
        return self.post_norms[sublayer](torch.add(x, residual, alpha=self.keel_alpha)), stream


class KeelEncoderLayer(KeelLayer, SublayerEncoderLayer):
    pass


class KeelDecoderLayer(KeelLayer, SublayerDecoderLayer):
    pass


class Keel(SublayerScheme):
    name = "keel"
    summary = "Keel: x_{k+1} = LN(alpha*x_k + f_k(LN(x_k))), alpha = sub-layers in the stack, no final LN"
    normalize_before = True  # fairseq's LN^in on each sub-layer's input; LN^post is the scheme's own
    encoder_layer_cls = KeelEncoderLayer
    decoder_layer_cls = KeelDecoderLayer

    def build_stack_output(self, fairseq_default, embed_dim, cfg):
        return None  # Post-LN: the last LN^post closes the stack
