"""Independent references for Hyper-Connections and mHC, written from the papers' equations.

Like ``reference_baselines.py``: the model's parameters and its attention / FFN / LayerNorm modules are used as
black-box functions, none of the plugin's layer, scheme or stack code. The n streams are a Python list of
(time, batch, C) tensors, every mapping entry a (time, batch) tensor (or a scalar), each sum written out.

HC (Zhu et al. 2025, Section 2), for every sub-layer T of a stack in order, each with its Pre-LN LayerNorm:
    H_bar = norm(H) (each stream);  A_m = s_a tanh(H_bar W_m) + A_m;  A_r = s_a tanh(H_bar W_r) + A_r;
    B = s_b tanh(H_bar W_b)^T + B;  h = A_m^T H;  H <- B^T T(LN(h)) + A_r^T H;  y = LN_top(sum_i h_i)
mHC (Xie et al. 2025, Eq. 3, 7-9):
    x' = RMSNorm(vec(x_l));  H~ = alpha (x' phi) + b for pre, post, res;  H^pre = sigma, H^post = 2 sigma,
    H^res = t_max rounds of column-then-row normalisation of exp(H~res);  x <- H^res x + H^post^T F(LN(H^pre x))
"""

import torch
import torch.nn.functional as F
from reference import final_norm
from reference_baselines import run_stacks


def hc_mappings(connection, streams, dynamic):
    """[A_m]_i, [A_r]_ij, [B]_j for every token (scalars when static)."""
    n = len(streams)
    a_m_static = connection.a_m_start + connection.a_m  # the stored form of A_m: its initial e_k plus the learned
    if not dynamic:
        return (
            [a_m_static[i] for i in range(n)],
            [[connection.a_r[i, j] for j in range(n)] for i in range(n)],
            [connection.b[j] for j in range(n)],
        )
    norm = connection.norm
    bars = [F.layer_norm(h, norm.normalized_shape, norm.weight, norm.bias, norm.eps) for h in streams]
    w, s_a, s_b = connection.w_alpha, connection.s_alpha, connection.s_beta
    a_m = [a_m_static[i] + s_a * torch.tanh(bars[i] @ w[:, 0]) for i in range(n)]
    a_r = [[connection.a_r[i, j] + s_a * torch.tanh(bars[i] @ w[:, 1 + j]) for j in range(n)] for i in range(n)]
    b = [connection.b[j] + s_b * torch.tanh(bars[j] @ connection.w_beta) for j in range(n)]
    return a_m, a_r, b


def weighted(weight, x):
    """weight (scalar or per token) times x (time, batch, C)."""
    return weight.unsqueeze(-1) * x if weight.dim() else weight * x


def sinkhorn(logits, iterations=20):
    m = torch.exp(logits)
    for _ in range(iterations):
        m = m / m.sum(dim=-2, keepdim=True)
        m = m / m.sum(dim=-1, keepdim=True)
    return m


def mhc_mappings(connection, streams):
    n = len(streams)
    flat = torch.cat(streams, dim=-1)  # vec(x_l): the n rows one after the other
    normed = flat / torch.sqrt(flat.pow(2).mean(dim=-1, keepdim=True) + 1e-20)
    p = normed @ connection.phi
    alpha = connection.alpha
    b_pre = connection.b_pre_start + connection.b_pre
    pre = [torch.sigmoid(alpha[0] * p[..., i] + b_pre[i]) for i in range(n)]
    post = [2 * torch.sigmoid(alpha[1] * p[..., n + i] + connection.b_post[i]) for i in range(n)]
    logits = torch.stack(
        [
            torch.stack([alpha[2] * p[..., 2 * n + i * n + j] + connection.b_res[i, j] for j in range(n)], -1)
            for i in range(n)
        ],
        dim=-2,
    )
    res = sinkhorn(logits)
    return pre, [[res[..., i, j] for j in range(n)] for i in range(n)], post


def hyper_stack(n, kind):
    """A stack function for ``run_stacks``: kind is "static", "dynamic" (HC) or "mhc"."""

    def run(stack, blocks, x):
        streams = [x] * n
        for layer, block in zip(stack.layers, blocks):
            for name, f, ln in block:
                connection = layer.hyper_connections[name]
                if kind == "mhc":
                    read, mix, write = mhc_mappings(connection, streams)
                    mix = [[mix[j][i] for j in range(n)] for i in range(n)]  # H^res x: stream i gets sum_j [i, j]
                else:
                    read, mix, write = hc_mappings(connection, streams, kind == "dynamic")
                out = f(ln(sum(weighted(read[i], streams[i]) for i in range(n))))
                streams = [
                    weighted(write[j], out) + sum(weighted(mix[i][j], streams[i]) for i in range(n)) for j in range(n)
                ]
        return final_norm(stack, sum(streams))

    return run


def hyper_connections(model, src_tokens, prev_tokens=None, n=4, kind="dynamic"):
    stack = hyper_stack(n, kind)
    return run_stacks(model, src_tokens, prev_tokens, stack, stack)
