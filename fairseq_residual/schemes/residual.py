"""ResiDual / Pre-Post-LN (Xie et al. 2023, arXiv:2304.14802, Section 4).

For every sub-layer f_k (self-attention; cross-attention in the decoder; FFN):

    x^f_k      = f_k(x^ln_k)              sub-layer output after dropout
    x^a_k      = x^ln_k + x^f_k           Post-LN residual ("left" path)
    x^ln_{k+1} = LN(x^a_k)                the next sub-layer sees the Post-LN path only
    x^d_{k+1}  = x^d_k + s * x^f_k        dual ("right") path, no LayerNorm inside

    y = alpha * LN(x^a_{N+1}) + LN(x^d_{N+1})     LN(x^a_{N+1}) is x^ln_{N+1}, the last
                                                  sub-layer's own Post-LN output

x^d_1 = s * x^ln_1 (the scaled input embedding after dropout), as the authors'
release does. s is ``--dual-stream-scale`` (the authors use 0.05 for OPUS-100 in
fp16, 1.0 elsewhere); LN is scale invariant, so s only changes the function
through LN's epsilon. The only new parameters are the LN on x^d, one per stack.

Output options (both default 1, the paper's and the authors' y = x^ln_{N+1} + LN(x^d_{N+1})):

* alpha is ``--residual-output-alpha``, the authors' ``enc_alpha`` / ``dec_alpha`` (one value for
  both stacks here: their released configs never set the two apart).
* c is ``--residual-output-scale``: ``initialize`` sets the gains of both LayerNorms that form y
  (the last layer's ``final_layer_norm``, whose output is x^ln_{N+1}, and the LN of x^d) to c; their
  biases start at zero, so y starts exactly c times its default size, and the gains stay learnable.
  At init both terms carry the embedding and are strongly aligned, so with c = 1 y is close to twice
  a Pre-LN stack's output (``fairseq_residual_tools/analysis/output_probe.py`` measures it).

Names: ``x_ln`` is x^ln, ``x_dual`` is x^d. Where they live during a forward pass:
the stack's layer loop carries the pair (x^ln, x^d) in a local (``ResiDual.start`` /
``step``); a layer receives x^d as its ``stream`` argument, adds each x^f_k to it in
``residual_sum`` (the Post-LN sum x^a_k is the other half of the same call) and returns
it. The hidden states fairseq records (``encoder_states``, ``inner_states``) are x^ln.
"""

import torch
from torch import Tensor, nn

from .base import (
    ResidualScheme,
    SublayerDecoderLayer,
    SublayerEncoderLayer,
    SublayerLayer,
    call_with_stream,
    stack_layers,
)

#: epsilon of the LN on x^d; the authors' release uses 1e-7 so that a small
#: ``--dual-stream-scale`` does not reach the epsilon (fairseq's default is 1e-5)
DUAL_NORM_EPS = 1e-7


class DualStreamLayer(SublayerLayer):
    """Mixin: fairseq's Post-LN layer that also adds every x^f_k to x^d (its ``stream``)."""

    def setup_layer(self, cfg, decoder):
        super().setup_layer(cfg, decoder)
        self.dual_stream_scale = float(cfg.dual_stream_scale)

    def residual_sum(self, sublayer, x, residual, block_input, x_dual):
        # x is x^f_k (post-dropout sub-layer output); residual is x^ln_k.
        # x^d + s * x^f as one kernel (no s * x^f temporary; with s = 1 backward has no multiply)
        return residual + x, torch.add(x_dual, x, alpha=self.dual_stream_scale)


class ResiDualEncoderLayer(DualStreamLayer, SublayerEncoderLayer):
    pass


class ResiDualDecoderLayer(DualStreamLayer, SublayerDecoderLayer):
    pass


class DualStreamOutput(nn.LayerNorm):
    """Top of a ResiDual stack: y = alpha * x^ln_{N+1} + LN(x^d_{N+1}).

    A LayerNorm subclass, so its parameters are the stack's ``layer_norm.weight``
    and ``layer_norm.bias`` as in fairseq's Pre-LN models; it also holds the stack's s and alpha.
    """

    def __init__(self, embed_dim: int, scale: float, alpha: float = 1.0):
        super().__init__(embed_dim, eps=DUAL_NORM_EPS)
        self.dual_stream_scale = float(scale)
        self.output_alpha = float(alpha)

    def forward(self, x_ln: Tensor, x_dual: Tensor) -> Tensor:  # type: ignore[override]
        # LN(x^d) + alpha * x^ln as one kernel; with alpha = 1 the same sum, bit for bit, as x^ln + LN(x^d)
        return torch.add(super().forward(x_dual), x_ln, alpha=self.output_alpha)


class ResiDual(ResidualScheme):
    name = "residual"
    summary = "ResiDual (PPLN): Post-LN path plus an un-normalised dual path, y = x^ln + LN(x^d)"
    normalize_before = False
    encoder_layer_cls = ResiDualEncoderLayer
    decoder_layer_cls = ResiDualDecoderLayer

    #: the stack output is y = alpha * x^ln + LN(x^d): --residual-output-alpha / --residual-output-scale apply
    dual_output = True

    def build_stack_output(self, fairseq_default, embed_dim, cfg):
        return DualStreamOutput(embed_dim, cfg.dual_stream_scale, cfg.residual_output_alpha)

    def initialize(self, model, cfg):
        """--residual-output-scale c: the gains of the two LayerNorms that form y start at c (see the module's doc).

        A stack without layers (the LM's throw-away encoder) has no Post-LN output to scale and is left as is."""
        scale = float(cfg.residual_output_scale)
        if scale == 1.0:  # fairseq's initialisation, untouched
            return
        with torch.no_grad():
            for stack in (model.encoder, model.decoder):
                layers = stack_layers(stack)
                if layers:
                    layers[-1].final_layer_norm.weight.fill_(scale)
                    stack.layer_norm.weight.fill_(scale)

    def start(self, stack, x):
        """(x^ln_1, x^d_1) = (x, s * x).

        x^ln_1 as a contiguous copy of fairseq's time-first view of the embedding: the first
        layer's q/k/v projections then run as fused addmm (not mm + a bias add) and save the copy
        for backward rather than the embedding's whole storage, as Pre-LN's first LayerNorm does."""
        scale = stack.layer_norm.dual_stream_scale
        return x.contiguous(), x if scale == 1.0 else x * scale

    def step(self, layer, carry, **kwargs):
        x_ln, rest, x_dual = call_with_stream(layer, carry[0], carry[1], **kwargs)
        return (x_ln, x_dual), rest

    def hidden_state(self, carry):
        """x^ln: the embedding x^ln_1, then each layer's Post-LN output x^ln_{l+1}; the last state is
        x^ln_{N+1}, not y = x^ln_{N+1} + LN(x^d_{N+1}) (that is the stack's output), as fairseq's
        Pre-LN records its last layer's output, not the final LayerNorm of it."""
        return carry[0]

    def finish(self, stack, carry):
        return stack.layer_norm(*carry)
