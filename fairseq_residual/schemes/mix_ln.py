"""Mix-LN (Li, Yin, Liu 2024/2025, "Mix-LN: Unleashing the Power of Deeper Layers by Combining Pre-LN and
Post-LN", arXiv:2412.13795; ICLR 2025): Post-LN in the first layers of a stack, Pre-LN in the rest.

For a stack of L layers and the ratio alpha (``--mix-ln-ratio``), with P = floor(alpha L) and every sub-layer
f_k (self-attention; cross-attention in the decoder; FFN) of layer l = 1 ... L:

    l <= P  (Post-LN):  x_{k+1} = LN_k(x_k + f_k(x_k))
    l >  P  (Pre-LN):   x_{k+1} = x_k + f_k(LN_k(x_k))
    y = LN(x_{K+1})                                       the stack's final LayerNorm, kept for every alpha

LN_k is the sub-layer's own fairseq LayerNorm (``self_attn_layer_norm``, ``encoder_attn_layer_norm``,
``final_layer_norm``), used after the sum in the first P layers and on the sub-layer's input in the others.
alpha = 0 is Pre-LN exactly (fairseq's ``normalize_before``); alpha = 1 is Post-LN followed by a final LN.

Choices where the paper is silent (it trains decoder-only LLaMA models; authors' code pixeli99/MixLN,
``NORM_TYPE=post_pre`` with ``POST_NUM`` = P):

* alpha's default, 0.25: the setting for the paper's 71M-1B models (the authors' scripts: P = 3 of 12 layers
  for LLaMA-71M, 6 of 24 for LLaMA-1B; their code takes P itself, P = floor(alpha L) maps the ratio onto it);
* each stack has its own L, P: encoder floor(alpha N), decoder floor(alpha M);
* the final LayerNorm stays for every alpha, as LLaMA's ``model.norm`` does in the authors' code: at alpha = 1
  the stack is Post-LN plus that LN, not fairseq's Post-LN (no final LN);
* the boundary: layer P + 1 is a plain Pre-LN layer. Its residual stream starts from layer P's output, which
  is already normalised, and its first LN normalises it again; nothing is added between the two wirings.
* initialisation: fairseq's, as in both of the paper's baselines.

Each layer is fairseq's own; ``MixLN.initialize`` sets the first P layers of each stack to Post-LN
(``normalize_before = False``, a configuration flag fairseq's layer reads in its forward).
"""

import math

from ..errors import ConfigError
from .base import ResidualScheme, stack_layers

#: the paper's alpha for all its models
DEFAULT_RATIO = 0.25


def post_ln_layers(ratio: float, layers: int) -> int:
    """P = floor(alpha L): how many layers at the bottom of an L-layer stack are Post-LN."""
    if not (math.isfinite(ratio) and 0.0 <= ratio <= 1.0):
        raise ConfigError(
            f"--mix-ln-ratio must lie in [0, 1] (the share of Post-LN layers at the bottom of each stack), got {ratio}"
        )
    return math.floor(ratio * layers)


class MixLN(ResidualScheme):
    name = "mix-ln"
    summary = "Mix-LN: Post-LN in the first floor(alpha*L) layers of each stack, Pre-LN above them, final LN"
    normalize_before = True  # the layers above P and the stack's final LayerNorm

    def initialize(self, model, cfg):
        ratio = float(cfg.mix_ln_ratio)
        for stack in (model.encoder, model.decoder):
            layers = stack_layers(stack)
            for layer in layers[: post_ln_layers(ratio, len(layers))]:
                layer.normalize_before = False
