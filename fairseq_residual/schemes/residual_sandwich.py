"""ResiDual with Sandwich-LN's output LayerNorm (a combination neither paper tested; ResiDual's Section 6
asks whether a Post-LN path with Sandwich-LN would do better at depth).

ResiDual's equations (``residual.py``) with every sub-layer output normalised first:

    x^g_k      = LN^out_k(f_k(x^ln_k))    f_k's output after dropout, then its own LayerNorm
    x^a_k      = x^ln_k + x^g_k
    x^ln_{k+1} = LN(x^a_k)                Post-LN path
    x^d_{k+1}  = x^d_k + s * x^g_k        dual path: the same normalised increment
    y          = x^ln_{N+1} + LN(x^d_{N+1})

Which tensor x^d receives: x^g_k, the increment the Post-LN path adds. ResiDual's dual path is the
un-normalised sum of exactly what the residual connections add (so that every sub-layer's gradient reaches
the top through it undiminished by the Post-LN LayerNorms); with LN^out that is x^g_k, not f_k. It also
bounds each increment (x^g_k has about unit RMS times LN^out's gain), so x^d grows like the square root of
the number of sub-layers whatever the sub-layers' scale: the growth that makes the authors scale x^d by 0.05
in fp16 is what Sandwich-LN was designed to tame.

LN^out_k as in ``sandwich.py`` (one per sub-layer, ``sublayer_output_norms[name]``, fairseq's init).
"""

from .base import SublayerDecoderLayer, SublayerEncoderLayer
from .residual import DualStreamLayer, ResiDual
from .sandwich import SandwichNormLayer


class ResiDualSandwichLayer(SandwichNormLayer, DualStreamLayer):
    pass


class ResiDualSandwichEncoderLayer(ResiDualSandwichLayer, SublayerEncoderLayer):
    pass


class ResiDualSandwichDecoderLayer(ResiDualSandwichLayer, SublayerDecoderLayer):
    pass


class ResiDualSandwich(ResiDual):
    name = "residual-sandwich"
    summary = "ResiDual whose sub-layer outputs pass Sandwich-LN's LN first: x^ln + LN(f), x^d + s LN(f)"
    encoder_layer_cls = ResiDualSandwichEncoderLayer
    decoder_layer_cls = ResiDualSandwichDecoderLayer
