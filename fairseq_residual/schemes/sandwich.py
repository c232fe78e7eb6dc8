"""Sandwich-LN (Ding et al. 2021, "CogView: Mastering Text-to-Image Generation via Transformers",
arXiv:2105.13290, Section 2.4): Pre-LN whose every sub-layer output is normalised again before the sum.

For every sub-layer f_k (self-attention; cross-attention in the decoder; FFN):

    x_{k+1} = x_k + LN^out_k(f_k(LN^in_k(x_k)))        f_k's output after dropout
    y       = LN(x_{N+1})                               fairseq's final Pre-LN LayerNorm

LN^in_k is fairseq's Pre-LN LayerNorm of the sub-layer (``self_attn_layer_norm``, ``encoder_attn_layer_norm``,
``final_layer_norm``); LN^out_k is new, one per sub-layer (``sublayer_output_norms[name]``), fairseq's
LayerNorm init (gain 1, bias 0). The paper's motivation: the Pre-LN stream grows with depth in fp16, and the
output LN bounds what each sub-layer adds.

Peri-LN (Kim et al. 2025, "Peri-LN: Revisiting Normalization Layer in the Transformer Architecture", ICML 2025,
arXiv:2502.02732), x_{k+1} = x_k + LN(f_k(LN(x_k))) with a final LN, is this same placement of norms under a later
name: ``--residual-scheme sandwich`` is Peri-LN.

Choices (authors' code, THUDM/CogView, ``--sandwich-ln``): LN^out takes the sub-layer's output after its
dropout (their attention and MLP modules apply the output dropout inside, before the "third" and "fourth"
LayerNorm), and every sub-layer has one, the decoder's cross-attention included (CogView has no
cross-attention; it is treated as the other sub-layers are).
"""

from fairseq.modules import LayerNorm
from torch import nn

from .base import PlainSumLayer, SublayerDecoderLayer, SublayerEncoderLayer, SublayerLayer, SublayerScheme


def sublayer_names(layer) -> list:
    """The sub-layers a layer runs, in order (an LM's decoder layer has no cross-attention)."""
    cross = getattr(layer, "encoder_attn", None) is not None
    return ["self_attn"] + (["encoder_attn"] if cross else []) + ["ffn"]


class SandwichNormLayer(SublayerLayer):
    """Mixin: LN^out_k on every sub-layer output before the residual sum of the layer it precedes in the bases
    (Pre-LN's plain sum for ``sandwich``, ResiDual's two paths for ``residual-sandwich``)."""

    def setup_layer(self, cfg, decoder):
        super().setup_layer(cfg, decoder)
        self.sublayer_output_norms = nn.ModuleDict(
            {name: LayerNorm(self.embed_dim, export=cfg.export) for name in sublayer_names(self)}
        )

    def residual_sum(self, sublayer, x, residual, block_input, stream):
        return super().residual_sum(sublayer, self.sublayer_output_norms[sublayer](x), residual, block_input, stream)


class SandwichLayer(SandwichNormLayer, PlainSumLayer):
    pre_norm = True


class SandwichEncoderLayer(SandwichLayer, SublayerEncoderLayer):
    pass


class SandwichDecoderLayer(SandwichLayer, SublayerDecoderLayer):
    pass


class Sandwich(SublayerScheme):
    name = "sandwich"
    summary = "Sandwich-LN: Pre-LN plus an LN on every sub-layer output, x_{k+1} = x_k + LN(f_k(LN(x_k)))"
    normalize_before = True
    encoder_layer_cls = SandwichEncoderLayer
    decoder_layer_cls = SandwichDecoderLayer
