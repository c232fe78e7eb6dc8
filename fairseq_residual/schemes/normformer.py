"""NormFormer (Shleifer, Weston, Ott 2021, "NormFormer: Improved Transformer Pretraining with Extra
Normalization", arXiv:2110.09456, Section 2): Pre-LN with three additions in every layer.

    self-attention:  x <- x + LN^attn(HeadScaleMHA(LN(x)))
                     HeadScaleMHA(Q, K, V) = Concat(gamma_1 h_1, ..., gamma_H h_H) W^O
    FFN:             x <- x + W_2 LN^fc(act(W_1 LN(x) + b_1)) + b_2
    cross-attention: x <- x + MHA(LN(x), enc)            (plain Pre-LN)
    y = LN(x_{N+1})                                       fairseq's final Pre-LN LayerNorm

h_i is head i's attention output before the output projection W^O; gamma (one scalar per head, init 1) is
``self_attn.out_proj``'s weight parametrisation ``HeadScale``: Concat(gamma_i h_i) W^O = Concat(h_i) W'^O with
W'^O = W^O diag(gamma_1 1_{d_h}, ..., gamma_H 1_{d_h}), so fairseq's attention (fused and incremental paths
alike) computes it unchanged. LN^attn is the layer's ``attn_ln``, LN^fc its ``ffn_layernorm`` (FFN width).

Choices. The paper's head scaling, before W^O: fairseq's decoder option ``--scale-heads`` (the authors'
release) scales the d_h-wide slices of the attention's output *after* W^O, which is not the paper's
equation (it mixes heads before scaling), so this scheme refuses ``--scale-heads``. As in fairseq's
``--scale-attn`` / ``--scale-fc``: LN^attn comes before the output dropout, LN^fc after the activation
dropout, and the cross-attention has neither (the paper's models are decoder-only). The encoder gets the same
three additions (fairseq's encoder has none of them). The paper's optional residual scaling, fairseq's
``--scale-resids``, works in the decoder as for any scheme; it is off by default, as in the paper's largest
models.
"""

import torch
from fairseq import utils
from fairseq.modules import LayerNorm
from torch import Tensor, nn
from torch.nn.utils import parametrize

from ..errors import ConfigError
from .base import PlainSumLayer, SublayerDecoderLayer, SublayerEncoderLayer, SublayerScheme


class HeadScale(nn.Module):
    """W^O -> W^O diag(gamma_i 1_{d_h}): the parametrisation of the output projection's weight that scales
    head i's output by gamma_i (W^O's input columns are the heads' outputs, concatenated)."""

    def __init__(self, heads: int, head_dim: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(heads))
        self.head_dim = head_dim

    def forward(self, weight: Tensor) -> Tensor:
        return weight.unflatten(1, (-1, self.head_dim)).mul(self.gamma.unsqueeze(-1)).flatten(1)


class NormFormerLayer(PlainSumLayer):
    """Mixin: fairseq's Pre-LN layer with the head scaling, LN^attn and LN^fc."""

    pre_norm = True

    def setup_layer(self, cfg, decoder):
        super().setup_layer(cfg, decoder)
        if utils.safe_getattr(cfg, "scale_heads", False):
            raise ConfigError(
                "--residual-scheme normformer scales each head before the output projection itself; "
                "--scale-heads (fairseq's scaling after it) would scale twice: drop --scale-heads"
            )
        side = cfg.decoder if decoder else cfg.encoder
        attn = self.self_attn
        parametrize.register_parametrization(attn.out_proj, "weight", HeadScale(attn.num_heads, attn.head_dim))
        if self.attn_ln is None:
            self.attn_ln = LayerNorm(self.embed_dim, export=cfg.export)
        if self.ffn_layernorm is None:
            self.ffn_layernorm = LayerNorm(side.ffn_embed_dim, export=cfg.export)


class NormFormerEncoderLayer(NormFormerLayer, SublayerEncoderLayer):
    pass


class NormFormerDecoderLayer(NormFormerLayer, SublayerDecoderLayer):
    pass


class NormFormer(SublayerScheme):
    name = "normformer"
    summary = "NormFormer: Pre-LN plus head scaling, an LN after self-attention and an LN after the FFN activation"
    normalize_before = True
    encoder_layer_cls = NormFormerEncoderLayer
    decoder_layer_cls = NormFormerDecoderLayer
