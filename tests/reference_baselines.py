"""Independent references for the paper's other baselines, written from each paper's equations.

Like ``reference.py``: the model's parameters and its attention / FFN / LayerNorm modules
are used as black-box functions f, but none of the plugin's residual, layer, encoder or
decoder code. Each stack is written as its sequence of sub-layers f_1, f_2, ... (per block:
self-attention, [cross-attention,] FFN) and each scheme's wiring is spelled out below.
Depth-derived constants are recomputed here from the papers' formulas.

DeepNet (Wang et al. 2022):   x <- LN(alpha x + f(x));  encoder alpha = 0.81 (N^4 M)^(1/16),
                              decoder alpha = (3M)^(1/4)
B2T (Takase et al. 2022):     block: h <- LN(x + f(x)) for all but the last sub-layer,
                              x_{l+1} = LN(h + f_last(h) + x_l)
Admin (Liu et al. 2020):      x <- LN(x omega_i + f_i(x)); profiling: omega_1 = 1,
                              omega_{i+1} = sqrt(Var[x omega_i] + Var[f_i(x)])
T-Fixup (Huang et al. 2020):  x <- x + f(x), no LayerNorm anywhere
DLCL (Wang et al. 2019):      x_{l+1} = sum_k W[l+1,k] LN_k(y_k), y_{l+1} = PreLN-block(x_{l+1}),
                              top = LN(sum_k W[N+1,k] LN_k(y_k))
"""

import math

import torch.nn.functional as F
from reference import causal_mask, ffn, final_norm, source_embedding, target_embedding

# --- the sub-layers f of one block, each with the LayerNorm that closes it in Post-LN ----------


def encoder_sublayers(layer, pad):
    def self_attn(x):
        return layer.self_attn(query=x, key=x, value=x, key_padding_mask=pad)[0]

    return [
        ("self_attn", self_attn, layer.self_attn_layer_norm),
        ("ffn", lambda x: ffn(layer, x), layer.final_layer_norm),
    ]


def decoder_sublayers(layer, self_pad, enc_out, enc_pad):
    def self_attn(x):
        mask = causal_mask(x.size(0))
        return layer.self_attn(query=x, key=x, value=x, key_padding_mask=self_pad, attn_mask=mask)[0]

    def cross_attn(x):
        return layer.encoder_attn(query=x, key=enc_out, value=enc_out, key_padding_mask=enc_pad, static_kv=True)[0]

    return [
        ("self_attn", self_attn, layer.self_attn_layer_norm),
        ("encoder_attn", cross_attn, layer.encoder_attn_layer_norm),
        ("ffn", lambda x: ffn(layer, x), layer.final_layer_norm),
    ]


def run_stacks(model, src_tokens, prev_tokens, encoder_stack, decoder_stack):
    """Encoder output, its padding mask and the decoder's logits for one scheme's stack functions."""
    enc = model.encoder
    enc_pad = src_tokens.eq(enc.padding_idx)
    blocks = [encoder_sublayers(layer, enc_pad) for layer in enc.layers]
    enc_out = encoder_stack(enc, blocks, source_embedding(enc, src_tokens))
    if prev_tokens is None:
        return enc_out, enc_pad, None
    dec = model.decoder
    self_pad = prev_tokens.eq(dec.padding_idx)
    blocks = [decoder_sublayers(layer, self_pad, enc_out, enc_pad) for layer in dec.layers]
    y = decoder_stack(dec, blocks, target_embedding(dec, prev_tokens))
    return enc_out, enc_pad, F.linear(y.transpose(0, 1), dec.embed_tokens.weight)


# --- DeepNet --------------------------------------------------------------------------------


def deepnet_alphas(encoder_layers, decoder_layers):
    n, m = encoder_layers, decoder_layers
    return 0.81 * (n**4 * m) ** (1 / 16), (3 * m) ** (1 / 4)


def deepnet(model, src_tokens, prev_tokens=None):
    enc_alpha, dec_alpha = deepnet_alphas(len(model.encoder.layers), len(model.decoder.layers))

    def stack(alpha):
        def run(_, blocks, x):
            for block in blocks:
                for _, f, ln in block:
                    x = ln(alpha * x + f(x))
            return x

        return run

    return run_stacks(model, src_tokens, prev_tokens, stack(enc_alpha), stack(dec_alpha))


# --- B2T --------------------------------------------------------------------------------------


def b2t_stack(_, blocks, x):
    for block in blocks:
        x_l = x
        for _, f, ln in block[:-1]:
            x = ln(x + f(x))
        _, f, ln = block[-1]
        x = ln(x + f(x) + x_l)
    return x


def b2t(model, src_tokens, prev_tokens=None):
    return run_stacks(model, src_tokens, prev_tokens, b2t_stack, b2t_stack)


# --- Admin ------------------------------------------------------------------------------------


def admin(model, src_tokens, prev_tokens=None):
    def run(stack, blocks, x):
        for layer, block in zip(stack.layers, blocks):
            for name, f, ln in block:
                x = ln(x * layer.omega(name) + f(x))
        return x

    return run_stacks(model, src_tokens, prev_tokens, run, run)


def population_variance(t):
    return t.double().var(unbiased=False).item()


def admin_profiled_omegas(model, src_tokens, prev_tokens):
    """The profiling chain of Liu et al. (the authors' adaptive-profiling) on one
    batch, from the model's sub-layers with every omega initialised afresh: (encoder, decoder)
    lists of omega_i, one per sub-layer in order."""
    chains = []

    def run(_, blocks, x):
        omega, values = 1.0, []
        for block in blocks:
            for _, f, ln in block:
                values.append(omega)
                fx = f(x)
                next_omega = math.sqrt(population_variance(x * omega) + population_variance(fx))
                x = ln(x * omega + fx)
                omega = next_omega
        chains.append(values)
        return x

    run_stacks(model, src_tokens, prev_tokens, run, run)
    return chains


# --- T-Fixup ----------------------------------------------------------------------------------


def tfixup_stack(_, blocks, x):
    for block in blocks:
        for _, f, _ in block:
            x = x + f(x)
    return x


def tfixup(model, src_tokens, prev_tokens=None):
    return run_stacks(model, src_tokens, prev_tokens, tfixup_stack, tfixup_stack)


# --- DLCL -------------------------------------------------------------------------------------


def dlcl_stack(stack, blocks, y0):
    """Pre-LN blocks reading sum_k W[l+1, k] LN_k(y_k); LN_0 = identity; the top mixes all N+1."""
    normed = [y0]
    for layer, block in zip(stack.layers, blocks):
        w = layer.history_weight
        x = sum(w[k] * normed[k] for k in range(len(normed)))
        for _, f, ln in block:  # ln is the LayerNorm of the sub-layer's input in Pre-LN
            x = x + f(ln(x))
        normed.append(layer.history_norm(x))
    w = stack.layer_norm.history_weight
    return final_norm(stack, sum(w[k] * normed[k] for k in range(len(normed))))


def dlcl(model, src_tokens, prev_tokens=None):
    return run_stacks(model, src_tokens, prev_tokens, dlcl_stack, dlcl_stack)


REFERENCES = {"deepnet": deepnet, "b2t": b2t, "admin": admin, "tfixup": tfixup, "dlcl": dlcl}
