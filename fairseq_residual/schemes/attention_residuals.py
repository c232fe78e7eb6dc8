"""Attention Residuals (Kimi Team, Moonshot AI 2026, "Attention Residuals", arXiv:2603.15031, Section 3; official code:
MoonshotAI/Attention-Residuals, the PyTorch-style pseudo-code of its README and of the paper's Figure 2), Full and
Block, on Pre-LN.

Every sub-layer f_l (self-attention; cross-attention in the decoder; FFN; the paper's "layers", numbered l = 1 .. L
along a stack) keeps its Pre-LN LayerNorm, and what it reads is no longer the residual stream but a softmax over depth
of the sources before it, with one learned pseudo-query w_l per sub-layer (Eq. 1-3; keys = values):

    h_l          = sum_i alpha_{i->l} v_i
    alpha_{i->l} = exp(w_l^T RMSNorm_l(v_i)) / sum_j exp(w_l^T RMSNorm_l(v_j))
    v_l          = f_l(LN_l(h_l))                          (fairseq's sub-layer with its output dropout)

Full AttnRes: the sources of f_l are v_0 = the embedding and v_1 .. v_{l-1}. Block AttnRes (``--attn-res-blocks N``):
the stack's layers in N blocks of S = layers / N consecutive layers, b_0 = v_0 and b_n = sum_{j in block n} v_j
(Eq. 5); the i-th sub-layer of block n reads [b_0, .., b_{n-1}] if i = 1 and [b_0, .., b_{n-1}, b_n^{i-1}] else,
b_n^{i-1} being the sum of the block's outputs so far (Eq. 6). The stack's output is the same read over every source
(v_0 .. v_L; b_0 .. b_N) with its own w and RMSNorm, then the stack's final LayerNorm. w = 0 at init (uniform weights,
every sub-layer starts reading the mean of its sources), RMSNorm's gain 1.

Names: ``DepthAttention.query`` = w_l, ``.key_gain`` = RMSNorm_l's gain g_l, ``inverse_rms`` = rho(v) = 1 / RMS(v)
(epsilon ``RMS_EPS``), so RMSNorm_l(v) = g_l * v * rho(v) and w_l^T RMSNorm_l(v_i) = ((w_l * g_l)^T v_i) rho(v_i):
the same logit, with rho(v_i) computed once per source instead of once per sub-layer reading it. The weighted sum is
DLCL's ``mix`` (``dlcl.py``) with per-token weights: the family's one difference, a softmax over depth in place of
DLCL's fixed learned row of W.

Where the sources live during a forward pass: as DLCL's history, in the stack's loop (``DepthCarry``), handed to each
layer as its positional tensor arguments (values, then their rho), so that activation checkpointing saves and
recomputes them like any input; inside the layer they travel in the ``stream`` of ``SublayerLayer`` (``Sources``),
and the layer returns the sources it added after fairseq's outputs. ``open_block`` says whether the last source is a
block's running sum b_n^i, which the layer's first sub-layer then continues; the loop counts layers to close a block
after every S-th (with LayerDrop: every S-th layer that runs; the output reads a block left open as well).

Choices the sources leave open (docs/schemes.md lists them): the paper's L counts sub-layers and its blocks end at
layer boundaries (the pseudo-code counts ``block_size`` in attention + MLP sub-layers and closes a block between two
layers), so a block is S layers: 2S sub-layers in the encoder, 3S in the decoder (cross-attention is a sub-layer
with its own w and RMSNorm); the first block holds its S layers' outputs only, as Eq. 5 writes it (the pseudo-code's
first ``partial_block`` is left to the caller); the decoder's cross-attention reads the encoder's output (one
tensor, as in every scheme); RMSNorm with a learned gain (the pseudo-code's per-sub-layer ``norm`` module) and
epsilon 1e-5 (not given); rho accumulated in float32. The hidden state a layer hands upward (fairseq's
``inner_states``) is the newest source it leaves: its last sub-layer's output (Full), the block's running sum (Block).
Incremental decoding needs nothing beyond fairseq's attention caches: every read is token by token.
"""

from typing import NamedTuple, Sequence, Tuple, cast

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from .base import ResidualScheme, SublayerDecoderLayer, SublayerEncoderLayer, SublayerLayer
from .dlcl import mix
from .sandwich import sublayer_names

#: the RMSNorm's epsilon, inside the square root
RMS_EPS = 1e-5


def inverse_rms(v: Tensor) -> Tensor:
    """rho(v) = 1 / sqrt(mean(v^2) + eps) over the width, one per token, accumulated in float32 or wider (squares of
    fp16 activations overflow), in v's dtype."""
    wide = v.to(torch.promote_types(v.dtype, torch.float32))
    return torch.rsqrt(wide.pow(2).mean(dim=-1) + RMS_EPS).to(v.dtype)


class Sources(NamedTuple):
    """The values a sub-layer attends over, their rho, and whether the last value is the open block's running sum."""

    values: Tuple[Tensor, ...]
    scales: Tuple[Tensor, ...]
    open_block: bool

    def add(self, v: Tensor, accumulate: bool) -> "Sources":
        """With ``v`` a sub-layer's output: a new source (Full, or a block's first), or added to the open block."""
        if accumulate and self.open_block:  # b_n^i = b_n^{i-1} + v
            v = self.values[-1] + v
            return Sources(self.values[:-1] + (v,), self.scales[:-1] + (inverse_rms(v),), True)
        return Sources(self.values + (v,), self.scales + (inverse_rms(v),), accumulate)


class DepthAttention(nn.Module):
    """w_l and RMSNorm_l's gain of one sub-layer (or of a stack's output): ``read`` is h_l."""

    def __init__(self, embed_dim: int):
        super().__init__()
        self.query = nn.Parameter(torch.zeros(embed_dim))
        self.key_gain = nn.Parameter(torch.ones(embed_dim))

    def read(self, values: Sequence[Tensor], scales: Sequence[Tensor]) -> Tensor:
        """sum_i alpha_i v_i, alpha = softmax_i((w * g)^T v_i rho(v_i))."""
        query = self.query * self.key_gain
        # (w * g)^T v over the rows of v, one matrix-vector product (a view of v's rows, whatever its strides)
        logits = torch.stack(
            [torch.mv(v.reshape(-1, v.size(-1)), query).view_as(rho) * rho for v, rho in zip(values, scales)]
        )
        return mix(values, torch.softmax(logits, dim=0).unsqueeze(-1))


class DepthAttentionLayer(SublayerLayer):
    """Mixin: fairseq's Pre-LN layer whose sub-layers read the depth attention over the sources and add to them.

    ``forward(*values, *scales, open_block=..., **fairseq_kwargs)`` -> (x, two of fairseq's other outputs (None where
    it has fewer), the values added, their rho); x is the newest value, the state fairseq records.
    """

    pre_norm = True

    def setup_layer(self, cfg, decoder):
        super().setup_layer(cfg, decoder)
        self.depth_attention = nn.ModuleDict({name: DepthAttention(self.embed_dim) for name in sublayer_names(self)})
        self.accumulate = int(cfg.attn_res_blocks) > 0  # Block: outputs add up into the open block

    def forward(self, *history: Tensor, open_block: bool = False, **kwargs):
        half = len(history) // 2
        sources = Sources(history[:half], history[half:], open_block)
        # super(): the sub-layer by sub-layer forward (base.SublayerEncoderLayer / SublayerDecoderLayer) this mixin
        # precedes; its x is not read (every sub-layer reads the sources), only passed along
        out = super().forward(sources.values[-1], stream=sources, **kwargs)
        x, rest, added = out[0], out[1:-1], out[-1]
        kept = half - open_block  # the open block's running sum is replaced by its continuation
        return (x, *(rest + (None, None))[:2], *added.values[kept:], *added.scales[kept:])

    def sublayer_input(self, sublayer, x, stream):
        # h_l, then the sub-layer's own Pre-LN LayerNorm
        h = cast(DepthAttention, self.depth_attention[sublayer]).read(stream.values, stream.scales)
        return self.sublayer_norm(sublayer)(h), stream

    def residual_sum(self, sublayer, x, residual, block_input, stream):
        # x is v_l (the sub-layer's output after dropout); no residual sum: it joins the sources
        stream = stream.add(x, self.accumulate)
        return stream.values[-1], stream


class DepthAttentionEncoderLayer(DepthAttentionLayer, SublayerEncoderLayer):  # type: ignore[misc]  # forward(*history)
    pass


class DepthAttentionDecoderLayer(DepthAttentionLayer, SublayerDecoderLayer):  # type: ignore[misc]  # forward(*history)
    pass


class DepthAttentionOutput(nn.LayerNorm):
    """Top of a stack: y = LN_top(sum_i alpha_{i->out} v_i) over every source. A LayerNorm subclass, so its LN
    parameters are the stack's ``layer_norm.weight`` / ``.bias`` as in fairseq's Pre-LN models; it also holds N."""

    def __init__(self, embed_dim: int, blocks: int):
        super().__init__(embed_dim)
        self.depth_attention = DepthAttention(embed_dim)
        self.blocks = int(blocks)

    def forward(self, sources: Sources) -> Tensor:  # type: ignore[override]
        return super().forward(self.depth_attention.read(sources.values, sources.scales))


class DepthCarry(NamedTuple):
    """What a stack's loop hands from layer to layer: the state fairseq records, the sources, the layers run and
    the layers per block (0: Full)."""

    state: Tensor
    sources: Sources
    layers_run: int
    block_layers: int


class AttentionResiduals(ResidualScheme):
    name = "attn-res"
    summary = (
        "Attention Residuals: each sub-layer reads a softmax over depth of the embedding and the earlier outputs "
        "(--attn-res-blocks N: of N block sums)"
    )
    normalize_before = True
    encoder_layer_cls = DepthAttentionEncoderLayer
    decoder_layer_cls = DepthAttentionDecoderLayer

    def validate(self, cfg):
        blocks = int(cfg.attn_res_blocks)
        if blocks < 0:
            raise ConfigError(
                f"--attn-res-blocks must be a number of blocks, or 0 for Full Attention Residuals; got {blocks}"
            )
        for side in ("decoder", "encoder"):  # a language model's encoder depth is its decoder's
            layers = getattr(cfg, side).layers
            if blocks and layers % blocks:
                divisors = ", ".join(str(k) for k in range(1, layers + 1) if layers % k == 0)
                raise ConfigError(
                    f"--attn-res-blocks {blocks} does not divide --{side}-layers {layers} into equal blocks: choose "
                    f"one of {divisors}, or 0 for Full Attention Residuals"
                )

    def build_stack_output(self, fairseq_default, embed_dim, cfg):
        return DepthAttentionOutput(embed_dim, cfg.attn_res_blocks)

    def start(self, stack, x):
        """The embedding as the first source, v_0 = b_0: a contiguous copy of fairseq's time-first view, which every
        read then takes as flat rows (one copy here instead of one in each read)."""
        x = x.contiguous()
        blocks = stack.layer_norm.blocks
        return DepthCarry(x, Sources((x,), (inverse_rms(x),), False), 0, len(stack.layers) // blocks if blocks else 0)

    def step(self, layer, carry, **kwargs):
        sources = carry.sources
        out = layer(*sources.values, *sources.scales, open_block=sources.open_block, **kwargs)
        added = out[3:]
        half, kept = len(added) // 2, len(sources.values) - sources.open_block
        layers_run = carry.layers_run + 1
        open_block = carry.block_layers > 0 and layers_run % carry.block_layers > 0
        sources = Sources(sources.values[:kept] + added[:half], sources.scales[:kept] + added[half:], open_block)
        return DepthCarry(out[0], sources, layers_run, carry.block_layers), out[1:3]

    def hidden_state(self, carry):
        return carry.state

    def finish(self, stack, carry):
        return stack.layer_norm(carry.sources)
