"""T-Fixup (Huang, Perez, Ba, Volkovs 2020, "Improving Transformer Optimization Through Better
Initialization", ICML 2020).

No LayerNorm anywhere (none in the layers, none on the embeddings, none at the top of a
stack); every sub-layer f (self-attention; cross-attention in the decoder; FFN) is a plain
residual

    x <- x + f(x)

and the training is made stable by the initialisation alone. With N encoder and M decoder
layers, d the embedding size:

    1. Xavier initialisation of the layers' weights; embeddings ~ N(0, d^(-1/2))
    2. decoder: value and output projections of both attentions and the FFN weights
       multiplied by (9 M)^(-1/4); target embeddings multiplied by (9 M)^(-1/4)
    3. encoder: value and output projections and the FFN weights multiplied by
       0.67 N^(-1/4); source embeddings multiplied by (9 N)^(-1/4)

Choices, following the authors' code (layer6ai-labs/T-Fixup, ``--Tfixup --dont-use-layernorm``):

* the encoder factor is 0.67 * N^(-1/4) (0.67 outside the root), as in the paper and the code;
* "Xavier" is fairseq's Xavier-uniform: the FFN weights get gain 1 and zero biases (fairseq's
  ``Linear`` of the time), the value projection gain 1 (the code multiplies fairseq's
  1/sqrt(2)-gain init by sqrt(2)), the output projection gain 1; the query/key projections keep
  fairseq's 1/sqrt(2) gain and are not scaled; biases are not scaled;
* the embeddings keep fairseq's N(0, d^(-1/2)) draw and sqrt(d) embedding scale; with shared
  source/target embeddings the one matrix is scaled once, by the encoder's (9 N)^(-1/4)
  (the code scales the decoder's embeddings only when they are not shared). The output
  projection is the (scaled) embedding when shared, fairseq's own otherwise (not scaled).

Appears in the ResiDual paper's IWSLT table (E6D6, E12D12) and WMT table (E6D6, E18D18).
"""

from typing import Tuple

import torch
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import nn

from .base import ResidualScheme, SchemeLayer, contiguous_gradient


def tfixup_scales(encoder_layers: int, decoder_layers: int) -> Tuple[float, float]:
    """(encoder, decoder) factors of the value/output/FFN weights (T-Fixup steps 2 and 3)."""
    return 0.67 * encoder_layers ** (-1 / 4), (9 * decoder_layers) ** (-1 / 4)


def embedding_scale(layers: int) -> float:
    """Factor of a stack's input embeddings: (9 L)^(-1/4) for a stack of L layers."""
    return (9 * layers) ** (-1 / 4)


def tfixup_layer_init(layer, scale: float):
    """Xavier init of one fairseq layer, then its value/output/FFN weights times ``scale``."""
    for fc in (layer.fc1, layer.fc2):
        nn.init.xavier_uniform_(fc.weight)
        nn.init.zeros_(fc.bias)
        fc.weight.data.mul_(scale)
    attentions = [layer.self_attn]
    if getattr(layer, "encoder_attn", None) is not None:
        attentions.append(layer.encoder_attn)
    for attn in attentions:
        nn.init.xavier_uniform_(attn.v_proj.weight)
        nn.init.xavier_uniform_(attn.out_proj.weight)
        attn.v_proj.weight.data.mul_(scale)
        attn.out_proj.weight.data.mul_(scale)


class NoLayerNormLayer(SchemeLayer):
    """Mixin: fairseq's Post-LN layer with every LayerNorm replaced by the identity,
    and the T-Fixup initialisation of its attention and FFN."""

    def setup_layer(self, cfg, decoder):
        for name in ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"):
            if getattr(self, name, None) is not None:
                setattr(self, name, nn.Identity())
        tfixup_layer_init(self, tfixup_scales(cfg.encoder.layers, cfg.decoder.layers)[int(decoder)])

    def residual_connection(self, x, residual):
        # f(x) first: the sum takes its (contiguous) layout. fairseq's residual + f(x) would keep the layout of
        # the time-first view of the embedding through every layer (no LayerNorm copies it): each projection
        # would then copy its input and run mm plus a separate bias add instead of one fused addmm
        return x + residual


class TFixupEncoderLayer(NoLayerNormLayer, TransformerEncoderLayerBase):
    pass


class TFixupDecoderLayer(NoLayerNormLayer, TransformerDecoderLayerBase):
    pass


class TFixup(ResidualScheme):
    name = "tfixup"
    summary = "T-Fixup: no LayerNorm, x + f(x), depth-scaled Xavier init and embeddings"
    normalize_before = False
    encoder_layer_cls = TFixupEncoderLayer
    decoder_layer_cls = TFixupDecoderLayer

    def build_stack_output(self, fairseq_default, embed_dim, cfg):
        return None  # no final LayerNorm

    def finish(self, stack, carry):
        return contiguous_gradient(carry)  # the last layer's output; its gradient copied once into the layers' layout

    def initialize(self, model, cfg):
        # the embeddings are shared by both stacks, so they are scaled here, once each
        source, target = model.encoder.embed_tokens, model.decoder.embed_tokens
        with torch.no_grad():
            source.weight.mul_(embedding_scale(cfg.encoder.layers))
            if target is not source:
                target.weight.mul_(embedding_scale(cfg.decoder.layers))
