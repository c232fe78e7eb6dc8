"""DeepNet / DeepNorm (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers",
arXiv:2203.00555, Figure 2).

Post-LN whose residual is up-weighted by alpha, for every sub-layer G_l
(self-attention; cross-attention in the decoder; FFN):

    x_{l+1} = LN(alpha * x_l + G_l(x_l))

and an initialisation that shrinks by beta what the sub-layers write to the residual:

    xavier_normal_(w, gain=beta)   FFN (fc1, fc2), value (v_proj) and output (out_proj) projections
    xavier_normal_(w, gain=1)      query (q_proj) and key (k_proj) projections

For an encoder-decoder model with N encoder and M decoder layers (paper, Figure 2):

    encoder: alpha = 0.81 (N^4 M)^(1/16)    beta = 0.87 (N^4 M)^(-1/16)
    decoder: alpha = (3 M)^(1/4)            beta = (12 M)^(-1/4)

computed in one place, ``deepnorm_constants``. The decoder's cross-attention uses the
decoder's constants (its value/output projections are scaled like the self-attention's).

Choices where the paper is silent or its code differs (authors' code: microsoft/torchscale):

* constants: the paper's. torchscale's encoder divides the existing init by
  (N^4 M)^(1/16) / 1.15, i.e. uses beta = 1.15 (N^4 M)^(-1/16) (1/0.87 in place of 0.87);
  we keep the paper's 0.87, which also matches its Figure 2 pseudo-code.
* weights: the paper's pseudo-code (Xavier-normal with gain beta, resp. 1). torchscale
  instead multiplies the init its modules already have (fairseq-style: Xavier-uniform with
  gain 1/sqrt(2) on q/k/v) by beta, so its value projections start 1/sqrt(2) smaller.
* biases: multiplied by beta for the beta-scaled projections, as torchscale does (it divides
  every parameter of fc1, fc2, v_proj and out_proj); q/k biases keep fairseq's init.
* no final LayerNorm (Post-LN), embeddings as fairseq initialises them.

Appears in the ResiDual paper's IWSLT table (E6D6, E12D12), WMT table (E6D6, E18D18)
and OPUS-100 table (100 layers).
"""

from typing import NamedTuple, Tuple

import torch
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import nn

from .base import ResidualScheme, SchemeLayer


class DeepNormConstants(NamedTuple):
    alpha: float  #: weight of the residual x_l inside the LayerNorm
    beta: float  #: init gain of the FFN, value and output projections


def deepnorm_constants(encoder_layers: int, decoder_layers: int) -> Tuple[DeepNormConstants, DeepNormConstants]:
    """(encoder, decoder) constants of an encoder-decoder DeepNet (paper, Figure 2)."""
    n, m = encoder_layers, decoder_layers
    encoder = DeepNormConstants(alpha=0.81 * (n**4 * m) ** (1 / 16), beta=0.87 * (n**4 * m) ** (-1 / 16))
    decoder = DeepNormConstants(alpha=(3 * m) ** (1 / 4), beta=(12 * m) ** (-1 / 4))
    return encoder, decoder


def constants_from_config(cfg) -> Tuple[DeepNormConstants, DeepNormConstants]:
    return deepnorm_constants(cfg.encoder.layers, cfg.decoder.layers)


def _xavier_normal(linear: nn.Linear, gain: float, scale_bias: bool):
    nn.init.xavier_normal_(linear.weight, gain=gain)
    if scale_bias and linear.bias is not None:
        linear.bias.data.mul_(gain)


def deepnorm_init(layer, beta: float):
    """The paper's ``deepnorm_init`` on one fairseq layer (both of its attentions and its FFN)."""
    attentions = [layer.self_attn]
    if getattr(layer, "encoder_attn", None) is not None:
        attentions.append(layer.encoder_attn)
    for attn in attentions:
        _xavier_normal(attn.q_proj, 1.0, scale_bias=False)
        _xavier_normal(attn.k_proj, 1.0, scale_bias=False)
        _xavier_normal(attn.v_proj, beta, scale_bias=True)
        _xavier_normal(attn.out_proj, beta, scale_bias=True)
    _xavier_normal(layer.fc1, beta, scale_bias=True)
    _xavier_normal(layer.fc2, beta, scale_bias=True)


class DeepNormLayer(SchemeLayer):
    """Mixin: fairseq's Post-LN layer with x_l weighted by alpha and the DeepNet init."""

    def setup_layer(self, cfg, decoder):
        constants = constants_from_config(cfg)[int(decoder)]
        self.deepnorm_alpha = constants.alpha
        deepnorm_init(self, constants.beta)

    def residual_connection(self, x, residual):
        # x is G_l(x_l) after dropout, residual is x_l; fairseq applies the LN next.
        # One kernel, as Post-LN's sum: no alpha * x_l temporary (backward: one multiply, grad * alpha)
        return torch.add(x, residual, alpha=self.deepnorm_alpha)


class DeepNormEncoderLayer(DeepNormLayer, TransformerEncoderLayerBase):
    pass


class DeepNormDecoderLayer(DeepNormLayer, TransformerDecoderLayerBase):
    pass


class DeepNet(ResidualScheme):
    name = "deepnet"
    summary = "DeepNet: x_{l+1} = LN(alpha*x_l + G(x_l)), FFN/value/output init gain beta"
    normalize_before = False
    encoder_layer_cls = DeepNormEncoderLayer
    decoder_layer_cls = DeepNormDecoderLayer
