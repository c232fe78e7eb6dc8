"""mHC: Manifold-Constrained Hyper-Connections (Xie, Wei, Cao et al., DeepSeek-AI 2025, arXiv:2512.24880,
Sections 3 and 4.1-4.2), on Pre-LN.

The n streams of Hyper-Connections (``hyper_connections.py``), x_l in R^{n x C}; every sub-layer F (self-attention;
cross-attention in the decoder; FFN; each keeps its Pre-LN input norm) is wrapped as (Eq. 3)

    x_{l+1} = H^res x_l + H^post^T F(H^pre x_l)

with the mappings computed token by token from the flattened streams (Eq. 7, 8):

    x~'     = RMSNorm(vec(x_l))                              over all n C entries
    H~pre   = alpha^pre  (x~' phi^pre)      + b^pre          phi^pre, phi^post in R^{nC x n}
    H~post  = alpha^post (x~' phi^post)     + b^post
    H~res   = alpha^res  mat(x~' phi^res)   + b^res          phi^res in R^{nC x n^2}, mat: 1 x n^2 -> n x n
    H^pre   = sigmoid(H~pre),   H^post = 2 sigmoid(H~post),   H^res = Sinkhorn-Knopp(H~res)

Sinkhorn-Knopp (Eq. 9): M^(0) = exp(H~res), M^(t) = T_r(T_c(M^(t-1))) (T_c: columns to sum 1, then T_r: rows),
t_max = 20; H^res = M^(t_max) is (near) doubly stochastic: non-negative, rows and columns summing to 1.
alpha^pre = alpha^post = alpha^res = 0.01 at init (the paper's Table 5). The coefficients are computed in
float32 (the paper's Eq. 14-19) and applied in the streams' dtype.

Names: ``phi`` = [phi^pre | phi^post | phi^res] (nC x (2n + n^2), the paper's consolidated phi_l, Eq. 10),
``alpha`` = (alpha^pre, alpha^post, alpha^res), ``b_pre_start`` + ``b_pre`` (b^pre's initial e_{k mod n}, a buffer,
plus a parameter starting at 0, as HC's A_m), ``b_post``, ``b_res``. The stack, its carry and its
output (y = LN(sum_i x_i)) are Hyper-Connections'.

Choices the paper does not state (docs/schemes.md): phi = 0 at init (as HC's W); the static biases start from
HC's initial matrices, b^pre = e_{k mod n}, b^res = I, except b^post = 0, whose 2 sigmoid is HC's B = 1; with
phi = 0 the streams stay identical at init, so the model is Pre-LN at init up to the LayerNorms' epsilon
(H^pre's entries sum to sigmoid(1) + (n - 1)/2, which the sub-layer's LayerNorm divides out). RMSNorm without a
gain (the paper absorbs it into phi) and with the paper's epsilon 1e-20. Sinkhorn-Knopp starts from
exp(H~res - max H~res): the same iterates (T_c removes any common factor), without overflow.
"""

from typing import Tuple

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from .base import SublayerDecoderLayer, SublayerEncoderLayer
from .hyper_connections import DYNAMIC_SCALE_INIT, HyperConnectionLayer, HyperConnections

#: t_max of Sinkhorn-Knopp (the paper's 20)
SINKHORN_ITERATIONS = 20
#: the RMSNorm's epsilon (the paper's Table 5: 1e-20, in float32)
RMS_EPS = 1e-20


def sinkhorn_knopp(logits: Tensor, iterations: int = SINKHORN_ITERATIONS) -> Tensor:
    """M^(t_max) from M^(0) = exp(logits), M^(t) = T_r(T_c(M^(t-1))), over the last two dimensions."""
    # minus a constant: the same iterates (T_c divides it out), so its gradient is 0 and need not be taken
    m = torch.exp(logits - logits.amax(dim=(-2, -1), keepdim=True).detach())
    for _ in range(iterations):
        m = m / m.sum(dim=-2, keepdim=True)  # T_c: every column sums to 1
        m = m / m.sum(dim=-1, keepdim=True)  # T_r: every row sums to 1
    return m


class ManifoldHyperConnection(nn.Module):
    """phi, alpha, b of one sub-layer: ``read`` x_l into the sub-layer's input H^pre x_l, ``write`` back."""

    b_pre_start: Tensor

    def __init__(self, embed_dim: int, streams: int, dynamic: bool = True):
        # dynamic: HyperConnection's signature; mHC's mappings are always input-dependent
        super().__init__()
        n = streams
        self.phi = nn.Parameter(torch.zeros(n * embed_dim, 2 * n + n * n))
        self.alpha = nn.Parameter(torch.full((3,), DYNAMIC_SCALE_INIT))
        self.b_pre = nn.Parameter(torch.zeros(n))
        self.register_buffer("b_pre_start", torch.zeros(n))
        self.b_post = nn.Parameter(torch.zeros(n))
        self.b_res = nn.Parameter(torch.eye(n))

    def start_at(self, index: int) -> None:
        """b^pre = e_{index mod n} at init: the buffer ``b_pre_start`` (b^pre = b_pre_start + b_pre), as HC's A_m."""
        with torch.no_grad():
            self.b_pre_start.zero_()[index % self.b_pre_start.numel()] = 1.0

    def mappings(self, streams: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """H^pre (..., n), H^post (..., n), H^res (..., n, n) for every token, in float32 (or wider)."""
        n = self.b_pre.numel()
        dtype = torch.promote_types(streams.dtype, torch.float32)
        flat = streams.flatten(-2).to(dtype)
        normed = flat * torch.rsqrt(flat.pow(2).mean(dim=-1, keepdim=True) + RMS_EPS)
        projected = torch.matmul(normed, self.phi.to(dtype))
        alpha = self.alpha.to(dtype)
        pre = alpha[0] * projected[..., :n] + (self.b_pre_start + self.b_pre)
        post = alpha[1] * projected[..., n : 2 * n] + self.b_post
        res = alpha[2] * projected[..., 2 * n :].unflatten(-1, (n, n)) + self.b_res
        return torch.sigmoid(pre), 2 * torch.sigmoid(post), sinkhorn_knopp(res)

    def read(self, streams: Tensor) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        h_pre, h_post, h_res = (m.to(streams.dtype) for m in self.mappings(streams))
        return torch.matmul(h_pre.unsqueeze(-2), streams).squeeze(-2), (h_res, h_post)

    @staticmethod
    def write(out: Tensor, streams: Tensor, coefficients: Tuple[Tensor, Tensor]) -> Tensor:
        """H^res x_l + H^post^T out: stream i gets sum_j H^res[i, j] x_j + H^post_i out."""
        h_res, h_post = coefficients
        return torch.matmul(h_res, streams) + h_post.unsqueeze(-1) * out.unsqueeze(-2)


class ManifoldHyperConnectionLayer(HyperConnectionLayer):
    connection_cls = ManifoldHyperConnection  # type: ignore[assignment]


class ManifoldHyperConnectionEncoderLayer(ManifoldHyperConnectionLayer, SublayerEncoderLayer):
    pass


class ManifoldHyperConnectionDecoderLayer(ManifoldHyperConnectionLayer, SublayerDecoderLayer):
    pass


class ManifoldHyperConnections(HyperConnections):
    name = "mhc"
    summary = (
        "mHC: Hyper-Connections whose stream mix is doubly stochastic (Sinkhorn-Knopp), read/write weights sigmoids"
    )
    encoder_layer_cls = ManifoldHyperConnectionEncoderLayer
    decoder_layer_cls = ManifoldHyperConnectionDecoderLayer

    def validate(self, cfg):
        super().validate(cfg)
        if getattr(cfg, "hc_static", False):
            raise ConfigError(
                "--hc-static is for --residual-scheme hc: mHC's mappings are always input-dependent; "
                "drop --hc-static, or use --residual-scheme hc"
            )
