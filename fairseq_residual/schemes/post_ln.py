"""Post-LN (Vaswani et al. 2017), fairseq's default wiring.

x^a_k      = x^ln_k + f_k(x^ln_k)
x^ln_{k+1} = LN(x^a_k)
y          = x^ln_{N+1}            (no final LayerNorm)
"""

from .base import ResidualScheme


class PostLN(ResidualScheme):
    name = "post"
    summary = "Post-LN: x_{k+1} = LN(x_k + f_k(x_k))"
    normalize_before = False
