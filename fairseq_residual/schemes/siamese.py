"""SiameseNorm (Li, Han, Cao, Huang, Zhou, Chen, Zhao, Jiang, Jiang, Huang 2026, "SiameseNorm: Breaking the Barrier
to Reconciling Pre/Post-Norm", ICML 2026, arXiv:2602.08064; authors' code Qwen-Applications/SiameseNorm,
``deit-model-siamesenorm.py``, class ``Block``): ResiDual's two streams sharing every sub-layer, a Post-Norm-like
stream x normalised before every sub-layer and a Pre-Norm-like stream y that only accumulates; every sub-layer
reads both, and the output normalises both.

The authors' code, for every sub-layer f_k (attention, MLP) of block l = 0, 1, ... with c_l = sqrt(2 (l + 1)):

    x <- LN^x_k(x)                          x normalised before every sub-layer
    z  = f_k(LN^in_k(x + LN^y_k(y)))        f_k's output after dropout
    x <- x + z / c_l,   y <- y + z          the same z added to both streams, to x divided by c_l
    x  = y = the embedding at the start;    out = LN^out(LN^x_last(x) + LN^y_last(y)) after the last block

Written as ResiDual's two paths (``residual.py``), the normalisation of x moved to the end of each sum, where
fairseq's Post-LN layer has it; the parameters are the same ones, named after their place here:

    x^ln_1     = LN_0(x),  x^d_1 = s x                   the embedding x, normalised; and as it is
    x^f_k      = f_k(LN^in_k(x^ln_k + LN^y_k(x^d_k)))
    x^ln_{k+1} = LN_k(x^ln_k + x^f_k / c)                LN_k: fairseq's Post-LN norm of the sub-layer
    x^d_{k+1}  = x^d_k + s x^f_k
    y          = LN^out(x^ln_{K+1} + LN^d(x^d_{K+1}))    x^ln_{K+1}: the last LN_k's output

c = sqrt(S (l + 1)) for layer l = 0, 1, ... of a stack whose layers have S sub-layers each: the code's
sqrt(2 (l + 1)) in the encoder and the language model (S = 2), sqrt(3 (l + 1)) in a decoder with
cross-attention, counting sub-layers up to the end of the layer as the code's 2 (l + 1) does for its two.

Names: LN_0 is the stack-top module's ``embedding_norm``, LN^out its ``output_norm``, LN^d the top module itself
(its weight and bias, epsilon 1e-7, as ResiDual's LN of x^d); LN^y_k is ``stream_norms[name]``, LN^in_k
``input_norms[name]``, c ``depth_factor`` (``setup_position``); s is ``--dual-stream-scale`` (1 in the authors'
code, which has no such scale; every use of y passes a LayerNorm, so s changes the function only through their
epsilon, as in ResiDual). The carry, its passage through the layers and the recorded hidden states (x^ln) are
ResiDual's; docs/schemes.md lists the choices the encoder-decoder forces.
"""

import math

from fairseq.modules import LayerNorm
from torch import Tensor, nn

from .base import SublayerDecoderLayer, SublayerEncoderLayer
from .residual import DualStreamLayer, DualStreamOutput, ResiDual
from .sandwich import sublayer_names


class SiameseLayer(DualStreamLayer):
    """Mixin: ResiDual's layer whose sub-layers read LN^in(x^ln + LN^y(x^d)) and add x^f / c to the Post-LN path."""

    def setup_layer(self, cfg, decoder):
        super().setup_layer(cfg, decoder)
        names = sublayer_names(self)
        self.stream_norms = nn.ModuleDict({name: LayerNorm(self.embed_dim, export=cfg.export) for name in names})
        self.input_norms = nn.ModuleDict({name: LayerNorm(self.embed_dim, export=cfg.export) for name in names})

    def setup_position(self, index):
        self.depth_factor = math.sqrt(len(self.input_norms) * (index + 1))

    def sublayer_input(self, sublayer, x, x_dual):
        return self.input_norms[sublayer](x + self.stream_norms[sublayer](x_dual)), x_dual

    def residual_sum(self, sublayer, x, residual, block_input, x_dual):
        # x is x^f_k, residual x^ln_k; each sum one kernel
        return residual.add(x, alpha=1.0 / self.depth_factor), x_dual.add(x, alpha=self.dual_stream_scale)


class SiameseEncoderLayer(SiameseLayer, SublayerEncoderLayer):
    pass


class SiameseDecoderLayer(SiameseLayer, SublayerDecoderLayer):
    pass


class SiameseOutput(DualStreamOutput):
    """Top of a SiameseNorm stack: LN_0 for the embedding (``embedding_norm``, read by ``start``) and
    y = LN^out(x^ln + LN^d(x^d)); a LayerNorm subclass whose own parameters are LN^d's, as ResiDual's top."""

    def __init__(self, embed_dim: int, scale: float, export: bool = False):
        super().__init__(embed_dim, scale)
        self.embedding_norm = LayerNorm(embed_dim, export=export)
        self.output_norm = LayerNorm(embed_dim, export=export)

    def forward(self, x_ln: Tensor, x_dual: Tensor) -> Tensor:  # type: ignore[override]
        return self.output_norm(super().forward(x_ln, x_dual))


class SiameseNorm(ResiDual):
    name = "siamese"
    summary = (
        "SiameseNorm: ResiDual's two streams, each sub-layer reads LN(x^ln + LN(x^d)) and adds f/c to the Post-LN "
        "path (c = sqrt(sub-layers to the layer's end)), f to x^d; y = LN(x^ln + LN(x^d))"
    )
    encoder_layer_cls = SiameseEncoderLayer
    decoder_layer_cls = SiameseDecoderLayer
    #: the stack output is normalised: --residual-output-alpha / --residual-output-scale are refused (so ResiDual's
    #: ``initialize``, which applies the scale, leaves the model as built)
    dual_output = False

    def build_stack_output(self, fairseq_default, embed_dim, cfg):
        return SiameseOutput(embed_dim, cfg.dual_stream_scale, cfg.export)

    def start(self, stack, x):
        """(x^ln_1, x^d_1) = (LN_0(x), s x): the authors' code starts both streams from the embedding and
        normalises x before the first sub-layer."""
        top = stack.layer_norm
        return top.embedding_norm(x), x if top.dual_stream_scale == 1.0 else x * top.dual_stream_scale
