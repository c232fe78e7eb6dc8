"""Pre-LN (Xiong et al. 2020), fairseq's ``--encoder/decoder-normalize-before``.

x^ln_k    = LN(x^a_k)
x^a_{k+1} = x^a_k + f_k(x^ln_k)
y         = LN(x^a_{N+1})          (fairseq's final ``layer_norm``)
"""

from .base import ResidualScheme


class PreLN(ResidualScheme):
    name = "pre"
    summary = "Pre-LN: x_{k+1} = x_k + f_k(LN(x_k)), final LN"
    normalize_before = True
