"""An independent reference for Attention Residuals, written from the paper's equations (Kimi Team 2026,
arXiv:2603.15031, Eq. 1-3, 5, 6).

Like ``reference_baselines.py``: the model's parameters and its attention / FFN / LayerNorm modules are used as
black-box functions, none of the plugin's layer, scheme or stack code. Every sub-layer f_l of a stack, in order, with
its Pre-LN LayerNorm LN_l, its pseudo-query w_l and RMSNorm gain g_l:

    alpha_{i->l} = softmax_i(w_l^T RMSNorm(k_i)),  RMSNorm(k) = g * k / sqrt(mean(k^2) + eps),  k_i = v_i
    h_l = sum_i alpha_{i->l} v_i;  v_l = f_l(LN_l(h_l))
    Full:  the sources of f_l are v_0 (the embedding), v_1 .. v_{l-1};  the output reads v_0 .. v_L
    Block: b_0 = v_0;  block n = the sub-layers of S = layers / N consecutive layers;  b_n = sum of its outputs;
           its i-th sub-layer reads [b_0 .. b_{n-1}] (i = 1) or [b_0 .. b_{n-1}, b_n^{i-1}] (the sum of the first
           i - 1 outputs);  the output reads b_0 .. b_N
    y = LN_top(the output's read)

RMSNorm normalises the keys exactly as written (the plugin folds g into w and keeps 1 / RMS per source).
"""

import torch
from reference import final_norm
from reference_baselines import run_stacks

#: RMSNorm's epsilon (the plugin's choice, docs/schemes.md)
EPS = 1e-5


def rms_norm(k, gain):
    return gain * k / torch.sqrt(k.pow(2).mean(dim=-1, keepdim=True) + EPS)


def depth_read(attention, values):
    """h = sum_i alpha_i v_i with alpha = softmax_i(w^T RMSNorm(v_i)), token by token."""
    logits = torch.stack([(attention.query * rms_norm(v, attention.key_gain)).sum(dim=-1) for v in values])
    alpha = torch.softmax(logits, dim=0)
    return sum(alpha[i].unsqueeze(-1) * values[i] for i in range(len(values)))


def full_stack(stack, blocks, x):
    values = [x]
    for layer, block in zip(stack.layers, blocks):
        for name, f, ln in block:  # ln: the sub-layer's Pre-LN LayerNorm
            values.append(f(ln(depth_read(layer.depth_attention[name], values))))
    return final_norm(stack, depth_read(stack.layer_norm.depth_attention, values))


def block_stack(block_count):
    def run(stack, blocks, x):
        per_block = len(blocks) // block_count
        done = [x]  # b_0 .. b_{n-1}
        for n in range(block_count):
            partial = None  # b_n^{i-1}; None before the block's first sub-layer
            for index in range(n * per_block, (n + 1) * per_block):
                layer = stack.layers[index]
                for name, f, ln in blocks[index]:
                    values = done if partial is None else done + [partial]
                    v = f(ln(depth_read(layer.depth_attention[name], values)))
                    partial = v if partial is None else partial + v
            done = done + [partial]  # b_n
        return final_norm(stack, depth_read(stack.layer_norm.depth_attention, done))

    return run


def attention_residuals(model, src_tokens, prev_tokens=None, blocks=0):
    stack = block_stack(blocks) if blocks else full_stack
    return run_stacks(model, src_tokens, prev_tokens, stack, stack)
