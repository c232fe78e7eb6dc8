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
Sandwich-LN (Ding et al. 2021): x <- x + LN^out(f(LN(x))), top = LN(x)
NormFormer (Shleifer et al. 2021): x <- x + LN^attn(Concat(gamma_i h_i) W^O) (self-attention, heads written
                              out from the q/k/v/output projections' weights), x <- x + W_2 LN^fc(act(W_1 LN(x)))
                              (FFN), plain Pre-LN cross-attention, top = LN(x)
ResiDual + Sandwich-LN:       g = LN^out(f(x^ln)); x^ln <- LN(x^ln + g); x^d <- x^d + s g;
                              top = alpha x^ln + LN(x^d)   (alpha: the authors' output weight, 1 by default)
Mix-LN (Li et al. 2024):      layers 1..floor(alpha L): x <- LN(x + f(x)); the others: x <- x + f(LN(x));
                              top = LN(x)
LN Scaling (Sun et al. 2025): layer l: x <- x + f(LN(x) / sqrt(l)), top = LN(x) (unscaled)
Keel (Chen and Wei 2026):     x <- RMS^post(alpha x + f(RMS^in(x))) (Eq. 8), alpha = L, the stack's sub-layers; in
                              the first layer alpha = 1 and the self-attention has no RMS^post (Section 3.1); every
                              norm RMS(x) = gamma x / sqrt(mean(x^2) + eps), no bias (Eq. 9); no top norm
SiameseNorm (Li et al. 2026), as the authors' Block (deit-model-siamesenorm.py) writes it, for every sub-layer f
                              of layer l: x <- LN^x(x); z = f(LN^in(x + LN^y(y))); x <- x + z / c, y <- y + s z, with
                              c = sqrt(S (l + 1)) for S sub-layers a layer; x = y = the embedding at the start (y
                              times s), top = LN^out(LN^x(x) + LN^d(y)). The LN^x before a sub-layer is the model's
                              Post-LN norm of the sub-layer before it (the stack's embedding norm before the first)
"""

import math
from functools import partial

import torch
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


# --- Sandwich-LN ------------------------------------------------------------------------------


def sandwich_stack(stack, blocks, x):
    for layer, block in zip(stack.layers, blocks):
        for name, f, ln in block:  # ln: the Pre-LN LayerNorm of the sub-layer's input
            x = x + layer.sublayer_output_norms[name](f(ln(x)))
    return final_norm(stack, x)


def sandwich(model, src_tokens, prev_tokens=None):
    return run_stacks(model, src_tokens, prev_tokens, sandwich_stack, sandwich_stack)


# --- NormFormer -------------------------------------------------------------------------------


def head_scaled_attention(attn, x, key_padding_mask, attn_mask=None):
    """Concat(gamma_1 h_1, ..., gamma_H h_H) W^O + b^O, every head written out from the projections' weights
    (the output projection's own weight, before the plugin's parametrisation)."""
    t, b, e = x.shape
    heads, dh = attn.num_heads, e // attn.num_heads

    def split(proj):  # (B, H, T, dh)
        return F.linear(x, proj.weight, proj.bias).reshape(t, b, heads, dh).permute(1, 2, 0, 3)

    scores = split(attn.q_proj) @ split(attn.k_proj).transpose(-1, -2) / math.sqrt(dh)
    if attn_mask is not None:
        scores = scores + attn_mask
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    h = scores.softmax(-1) @ split(attn.v_proj)
    gamma = attn.out_proj.parametrizations.weight[0].gamma
    concat = (h * gamma[None, :, None, None]).permute(2, 0, 1, 3).reshape(t, b, e)
    return F.linear(concat, attn.out_proj.parametrizations.weight.original, attn.out_proj.bias)


def normformer_sublayers(layer, self_pad, causal, enc_out=None, enc_pad=None):
    def self_attn(x):
        mask = causal_mask(x.size(0)) if causal else None
        return layer.attn_ln(head_scaled_attention(layer.self_attn, x, self_pad, mask))

    def cross_attn(x):
        return layer.encoder_attn(query=x, key=enc_out, value=enc_out, key_padding_mask=enc_pad, static_kv=True)[0]

    def ffn(x):
        return layer.fc2(layer.ffn_layernorm(F.relu(layer.fc1(x))))

    cross = [("encoder_attn", cross_attn, layer.encoder_attn_layer_norm)] if enc_out is not None else []
    return [("self_attn", self_attn, layer.self_attn_layer_norm), *cross, ("ffn", ffn, layer.final_layer_norm)]


def pre_ln_stack(stack, blocks, x):
    for block in blocks:
        for _, f, ln in block:
            x = x + f(ln(x))
    return final_norm(stack, x)


def normformer(model, src_tokens, prev_tokens=None):
    enc, dec = model.encoder, model.decoder
    enc_pad = src_tokens.eq(enc.padding_idx)
    blocks = [normformer_sublayers(layer, enc_pad, causal=False) for layer in enc.layers]
    enc_out = pre_ln_stack(enc, blocks, source_embedding(enc, src_tokens))
    if prev_tokens is None:
        return enc_out, enc_pad, None
    self_pad = prev_tokens.eq(dec.padding_idx)
    blocks = [normformer_sublayers(layer, self_pad, True, enc_out, enc_pad) for layer in dec.layers]
    y = pre_ln_stack(dec, blocks, target_embedding(dec, prev_tokens))
    return enc_out, enc_pad, F.linear(y.transpose(0, 1), dec.embed_tokens.weight)


# --- ResiDual with Sandwich-LN ----------------------------------------------------------------


def residual_sandwich_stack(stack, blocks, x_ln, scale=1.0, alpha=1.0):
    x_d = scale * x_ln
    for layer, block in zip(stack.layers, blocks):
        for name, f, ln in block:  # ln: the Post-LN LayerNorm closing the sub-layer
            g = layer.sublayer_output_norms[name](f(x_ln))
            x_d = x_d + scale * g
            x_ln = ln(x_ln + g)
    return alpha * x_ln + final_norm(stack, x_d)


def residual_sandwich(model, src_tokens, prev_tokens=None, alpha=1.0):
    stack = partial(residual_sandwich_stack, alpha=alpha)
    return run_stacks(model, src_tokens, prev_tokens, stack, stack)


# --- Mix-LN -------------------------------------------------------------------------------------


def mix_ln(model, src_tokens, prev_tokens=None, ratio=0.25):
    def run(stack, blocks, x):
        post_layers = math.floor(ratio * len(blocks))
        for number, block in enumerate(blocks, start=1):
            for _, f, ln in block:
                x = ln(x + f(x)) if number <= post_layers else x + f(ln(x))
        return final_norm(stack, x)

    return run_stacks(model, src_tokens, prev_tokens, run, run)


# --- LayerNorm Scaling ------------------------------------------------------------------------


def layer_norm(ln, x):
    """LN(x) with the module's gain, bias and epsilon, computed here (not by the module's forward)."""
    return F.layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps)


def ln_scaling_stack(stack, blocks, x):
    for number, block in enumerate(blocks, start=1):
        for _, f, ln in block:  # ln: the Pre-LN LayerNorm of the sub-layer's input
            x = x + f(layer_norm(ln, x) / math.sqrt(number))
    return final_norm(stack, x)


def ln_scaling(model, src_tokens, prev_tokens=None):
    return run_stacks(model, src_tokens, prev_tokens, ln_scaling_stack, ln_scaling_stack)


# --- Keel ---------------------------------------------------------------------------------------


def rms_norm(norm, x):
    """gamma x / sqrt(mean(x^2) + eps) with the module's gain and epsilon, computed here (Keel's Eq. 9: no bias)."""
    return norm.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps)


def keel_stack(stack, blocks, x):
    alpha = sum(len(block) for block in blocks)  # L: the sub-layers of the stack
    for number, (layer, block) in enumerate(zip(stack.layers, blocks), start=1):
        for name, f, norm_in in block:  # norm_in: the norm of the sub-layer's input
            if number == 1:  # Section 3.1: no alpha in the first layer, no Post-LN after its attention
                x = x + f(rms_norm(norm_in, x))
                if name != "self_attn":
                    x = rms_norm(layer.post_norms[name], x)
            else:
                x = rms_norm(layer.post_norms[name], alpha * x + f(rms_norm(norm_in, x)))
    return x


def keel(model, src_tokens, prev_tokens=None):
    return run_stacks(model, src_tokens, prev_tokens, keel_stack, keel_stack)


# --- SiameseNorm --------------------------------------------------------------------------------


def siamese_stack(stack, blocks, embedding, scale=1.0):
    top = stack.layer_norm
    # LN^x, applied to x before each sub-layer, and after the last one for the top
    x_norms = [top.embedding_norm] + [post_norm for block in blocks for _, _, post_norm in block]
    x, y = embedding, scale * embedding
    k = 0
    for l, (layer, block) in enumerate(zip(stack.layers, blocks)):
        c = math.sqrt(len(block) * (l + 1))
        for name, f, _ in block:
            x = layer_norm(x_norms[k], x)
            z = f(layer_norm(layer.input_norms[name], x + layer_norm(layer.stream_norms[name], y)))
            x, y = x + z / c, y + scale * z
            k += 1
    return layer_norm(top.output_norm, layer_norm(x_norms[k], x) + layer_norm(top, y))


def siamese(model, src_tokens, prev_tokens=None, scale=1.0):
    stack = partial(siamese_stack, scale=scale)
    return run_stacks(model, src_tokens, prev_tokens, stack, stack)


REFERENCES = {
    "deepnet": deepnet,
    "b2t": b2t,
    "admin": admin,
    "tfixup": tfixup,
    "dlcl": dlcl,
    "sandwich": sandwich,
    "normformer": normformer,
    "residual-sandwich": residual_sandwich,
    "mix-ln": mix_ln,
    "ln-scaling": ln_scaling,
    "keel": keel,
    "siamese": siamese,
}
