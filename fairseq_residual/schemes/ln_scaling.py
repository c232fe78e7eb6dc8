"""LayerNorm Scaling (Sun, Song, Li, Yin, Zheng, Liu 2025, "The Curse of Depth in Large Language Models",
arXiv:2502.05795): Pre-LN whose every LayerNorm output in layer l is scaled by 1/sqrt(l).

For every sub-layer f_k (self-attention; cross-attention in the decoder; FFN) of layer l = 1 ... L:

    x_{k+1} = x_k + f_k(LN_k(x_k) / sqrt(l))
    y       = LN(x_{K+1})                       fairseq's final Pre-LN LayerNorm, not scaled

LN_k is fairseq's Pre-LN LayerNorm of the sub-layer. LN(x) / sqrt(l) = x_hat * (gamma / sqrt(l)) + beta / sqrt(l),
so ``ScaledLayerNorm`` folds the factor into its gain and bias at every call (2d multiplies instead of one per
element of the output; the same function and gradients, gamma and beta remain the learned parameters).

From the paper and the authors' code (lmsdss/LayerNorm-Scaling, ``NORM_TYPE=LNS``): l counts from 1 (the factor
is 1/sqrt(layer_index + 1)), both LayerNorms of a layer get its factor, the final LayerNorm gets none, and the
initialisation is the model's plain one: the paper recommends removing the depth-scaled initialisation of output
projections (GPT-2 / OLMo style) when using LNS, and fairseq has none.

Choices the paper (decoder-only LLaMA models) leaves open: each stack counts its own layers from 1 (encoder
and decoder alike), and the decoder's cross-attention LayerNorm is scaled by its layer's factor too, as the
other two ("every LayerNorm in layer l").
"""

import math

import torch.nn.functional as F
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import Tensor, nn

from .base import ResidualScheme, SchemeLayer, stack_layers

#: fairseq's Pre-LN LayerNorms of a layer, one per sub-layer (the decoder's cross-attention one may be None)
LAYER_NORMS = ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm")


class ScaledLayerNorm(nn.LayerNorm):
    """LayerNorm whose output is multiplied by ``scale`` (a constant of the layer's depth, set once)."""

    scale: float = 1.0

    def forward(self, x: Tensor) -> Tensor:
        if self.scale == 1.0:  # layer 1: plain LayerNorm, no extra work
            return super().forward(x)
        return F.layer_norm(x, self.normalized_shape, self.weight * self.scale, self.bias * self.scale, self.eps)


def scaled_copy(norm: nn.LayerNorm) -> ScaledLayerNorm:
    """A ScaledLayerNorm with ``norm``'s shape, epsilon and parameters (the same state-dict keys)."""
    scaled = ScaledLayerNorm(norm.normalized_shape, eps=norm.eps, elementwise_affine=True)
    scaled.load_state_dict(norm.state_dict())
    return scaled


class LayerNormScalingLayer(SchemeLayer):
    """Mixin: fairseq's Pre-LN layer whose LayerNorms are ``ScaledLayerNorm``s (scale set by the scheme)."""

    def setup_layer(self, cfg, decoder):
        for name in LAYER_NORMS:
            norm = getattr(self, name, None)
            if norm is not None:
                setattr(self, name, scaled_copy(norm))


class LayerNormScalingEncoderLayer(LayerNormScalingLayer, TransformerEncoderLayerBase):
    pass


class LayerNormScalingDecoderLayer(LayerNormScalingLayer, TransformerDecoderLayerBase):
    pass


def depth_scale(layer_number: int) -> float:
    """1/sqrt(l) for layer l = 1, 2, ... of a stack."""
    return 1.0 / math.sqrt(layer_number)


class LayerNormScaling(ResidualScheme):
    name = "ln-scaling"
    summary = "LayerNorm Scaling: Pre-LN, every LN output in layer l scaled by 1/sqrt(l), final LN unscaled"
    normalize_before = True
    encoder_layer_cls = LayerNormScalingEncoderLayer
    decoder_layer_cls = LayerNormScalingDecoderLayer

    def initialize(self, model, cfg):
        for stack in (model.encoder, model.decoder):
            for number, layer in enumerate(stack_layers(stack), start=1):
                for name in LAYER_NORMS:
                    norm = getattr(layer, name, None)
                    if norm is not None:
                        norm.scale = depth_scale(number)
