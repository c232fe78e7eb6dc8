"""Independent reference implementations written straight from the papers' equations.

They use the model's parameters and its attention / FFN / LayerNorm modules as
black-box functions f_k, but none of the plugin's residual, layer, encoder or
decoder code: the wiring below is the paper's, written out by hand.

ResiDual (Xie et al. 2023), for every sub-layer f_k in order:
    x^f_k = f_k(x^ln_k);  x^ln_{k+1} = LN_k(x^ln_k + x^f_k);  x^d_{k+1} = x^d_k + s * x^f_k
    x^d_1 = s * x^ln_1;   y = alpha * x^ln_{N+1} + LN_final(x^d_{N+1})

alpha weights the Post-LN term of the output as the authors' release does (``enc_alpha`` / ``dec_alpha`` in
resi_dual.py: ``x * alpha + layer_norm(res)``; 1 in the paper and in their configs).
"""

import math

import torch
import torch.nn.functional as F


def source_embedding(encoder, src_tokens):
    """Scaled token embedding + positions, padding zeroed, as (T, B, C)."""
    x = math.sqrt(encoder.embed_tokens.embedding_dim) * encoder.embed_tokens(src_tokens)
    x = x + encoder.embed_positions(src_tokens)
    x = x * (1 - src_tokens.eq(encoder.padding_idx).unsqueeze(-1).type_as(x))
    return x.transpose(0, 1)


def target_embedding(decoder, prev_tokens):
    x = math.sqrt(decoder.embed_tokens.embedding_dim) * decoder.embed_tokens(prev_tokens)
    x = x + decoder.embed_positions(prev_tokens)
    return x.transpose(0, 1)


def ffn(layer, x):
    return layer.fc2(F.relu(layer.fc1(x)))


def final_norm(stack, x):
    ln = stack.layer_norm
    return F.layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps)


def residual_encoder_paths(model, src_tokens, scale=1.0):
    """x^ln_{N+1} and x^d_{N+1} of the encoder (time first), and its padding mask."""
    enc = model.encoder
    pad = src_tokens.eq(enc.padding_idx)
    x_ln = source_embedding(enc, src_tokens)
    x_d = scale * x_ln
    for layer in enc.layers:
        f = layer.self_attn(query=x_ln, key=x_ln, value=x_ln, key_padding_mask=pad)[0]
        x_d = x_d + scale * f
        x_ln = layer.self_attn_layer_norm(x_ln + f)
        f = ffn(layer, x_ln)
        x_d = x_d + scale * f
        x_ln = layer.final_layer_norm(x_ln + f)
    return x_ln, x_d, pad


def residual_encoder(model, src_tokens, scale=1.0, alpha=1.0):
    x_ln, x_d, pad = residual_encoder_paths(model, src_tokens, scale)
    return alpha * x_ln + final_norm(model.encoder, x_d), pad


def causal_mask(t):
    return torch.triu(torch.full((t, t), float("-inf")), 1)


def residual_decoder(model, src_tokens, prev_tokens, scale=1.0, alpha=1.0):
    enc_out, enc_pad = residual_encoder(model, src_tokens, scale, alpha)
    dec = model.decoder
    self_pad = prev_tokens.eq(dec.padding_idx)
    x_ln = target_embedding(dec, prev_tokens)
    x_d = scale * x_ln
    mask = causal_mask(x_ln.size(0))
    for layer in dec.layers:
        f = layer.self_attn(query=x_ln, key=x_ln, value=x_ln, key_padding_mask=self_pad, attn_mask=mask)[0]
        x_d = x_d + scale * f
        x_ln = layer.self_attn_layer_norm(x_ln + f)
        f = layer.encoder_attn(query=x_ln, key=enc_out, value=enc_out, key_padding_mask=enc_pad, static_kv=True)[0]
        x_d = x_d + scale * f
        x_ln = layer.encoder_attn_layer_norm(x_ln + f)
        f = ffn(layer, x_ln)
        x_d = x_d + scale * f
        x_ln = layer.final_layer_norm(x_ln + f)
    y = alpha * x_ln + final_norm(dec, x_d)
    return F.linear(y.transpose(0, 1), dec.embed_tokens.weight)  # shared output projection
