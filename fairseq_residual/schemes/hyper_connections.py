"""Hyper-Connections (Zhu, Huang, Huang, Zeng, Mao, Wu, Min, Zhou 2025, ICLR, arXiv:2409.19606), on Pre-LN.

The hidden state is n streams, H = (h_1 .. h_n)^T in R^{n x C}; the embedding is copied into each. Every
sub-layer T_k (self-attention; cross-attention in the decoder; FFN), numbered k = 0, 1, ... along its stack,
keeps its Pre-LN input norm and is wrapped as

    h       = A_m^T H                       read: a weighted sum of the streams (width connection)
    H      <- B^T T_k(h) + A_r^T H          write back into every stream, mix the streams (depth connection)

with A_m in R^{n x 1}, A_r in R^{n x n}, B in R^{1 x n}, one set per sub-layer. Dynamic Hyper-Connections (the
default) add an input-dependent part, computed token by token from the streams themselves:

    H_bar   = norm(H)                                   each stream normalised over C
    A_m(H)  = s_alpha * tanh(H_bar W_m) + A_m           W_m in R^{C x 1}
    A_r(H)  = s_alpha * tanh(H_bar W_r) + A_r           W_r in R^{C x n}
    B(H)    = s_beta  * tanh(H_bar W_beta)^T + B        W_beta in R^{C x 1}

``--hc-static`` keeps only the static A_m, A_r, B. Initialisation (the paper's, Pre-LN at init):
A_m = e_{k mod n}, A_r = I, B = 1 (all ones), W = 0, s_alpha = s_beta = 0.01. Stack output: the sum of the
streams, then the final LayerNorm, y = LN(sum_i h_i).

Names: ``a_m_start`` + ``a_m`` (the initial e_{k mod n}, a buffer, plus a parameter starting at 0), ``a_r``, ``b``
the static matrices; ``w_alpha`` = [W_m | W_r] (C x (1 + n)), ``w_beta`` = W_beta,
``s_alpha``, ``s_beta``; ``norm`` the dynamic part's LayerNorm. Where H lives during a forward pass: the stack's
layer loop carries it (time, batch, n, C) in a local; each layer receives it as its x, and
``sublayer_input`` / ``residual_sum`` hand the sub-layer's A_r, B from its read to its write in the layer's
``stream``. The hidden states fairseq records are sum_i h_i, what the final LayerNorm reads.

Choices the paper leaves open (docs/schemes.md lists them): k counts the sub-layers of a stack (2 per encoder
layer, 3 per decoder layer with cross-attention, 2 per LM layer); the decoder's cross-attention reads the
encoder's output y (one tensor, as in every scheme); norm is a LayerNorm with learned gain and bias, one per
sub-layer (public code following the paper's pseudo-code says the paper used LayerNorm; the mHC paper restates HC
with RMSNorm); the same sums close the encoder, the decoder and the LM.
"""

from typing import Any, Tuple

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from .base import SublayerDecoderLayer, SublayerEncoderLayer, SublayerLayer, SublayerScheme, stack_layers

#: the initial s_alpha, s_beta of the dynamic part (the paper's 0.01)
DYNAMIC_SCALE_INIT = 0.01


class HyperConnection(nn.Module):
    """A_m, A_r, B of one sub-layer (and their dynamic part): ``read`` H into the sub-layer's input h,
    ``write`` its output back. A_m = ``a_m_start`` + ``a_m``: the paper's initial e_{k mod n} is a buffer that
    ``start_at`` sets once k is known (the scheme's ``initialize``: a layer does not know its index when fairseq
    builds it), the learned parameter starts at 0; everything else takes its initial value here."""

    a_m_start: Tensor

    def __init__(self, embed_dim: int, streams: int, dynamic: bool):
        super().__init__()
        n = streams
        self.a_m = nn.Parameter(torch.zeros(n))
        self.register_buffer("a_m_start", torch.zeros(n))
        self.a_r = nn.Parameter(torch.eye(n))
        self.b = nn.Parameter(torch.ones(n))
        self.dynamic = dynamic
        if dynamic:
            self.norm = nn.LayerNorm(embed_dim)
            self.w_alpha = nn.Parameter(torch.zeros(embed_dim, 1 + n))
            self.w_beta = nn.Parameter(torch.zeros(embed_dim))
            self.s_alpha = nn.Parameter(torch.tensor(DYNAMIC_SCALE_INIT))
            self.s_beta = nn.Parameter(torch.tensor(DYNAMIC_SCALE_INIT))

    def start_at(self, index: int) -> None:
        """A_m = e_{index mod n} at init, for the sub-layer ``index`` of its stack (Pre-LN at init). A buffer only is
        written: under FSDP a parameter outside its layer's call may be a shard of another worker's."""
        with torch.no_grad():
            self.a_m_start.zero_()[index % self.a_m_start.numel()] = 1.0

    def read(self, streams: Tensor) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        """h = A_m^T H, and (A_r, B) for the write. Static: A_m (n), A_r (n x n), B (n); dynamic: per token."""
        if not self.dynamic:
            return torch.matmul(self.a_m_start + self.a_m, streams), (self.a_r, self.b)
        normed = self.norm(streams)
        alpha = self.s_alpha * torch.tanh(torch.matmul(normed, self.w_alpha))  # (..., n, 1 + n): row i from h_i
        beta = self.s_beta * torch.tanh(torch.matmul(normed, self.w_beta))  # (..., n)
        a_m, a_r = alpha[..., 0] + (self.a_m_start + self.a_m), alpha[..., 1:] + self.a_r
        h = torch.matmul(a_m.unsqueeze(-2), streams).squeeze(-2)
        return h, (a_r, beta + self.b)

    @staticmethod
    def write(out: Tensor, streams: Tensor, coefficients: Tuple[Tensor, Tensor]) -> Tensor:
        """B^T out + A_r^T H: stream j gets B_j * out + sum_i A_r[i, j] h_i."""
        a_r, b = coefficients
        return torch.matmul(a_r.transpose(-1, -2), streams) + b.unsqueeze(-1) * out.unsqueeze(-2)


class HyperConnectionLayer(SublayerLayer):
    """Mixin: fairseq's Pre-LN layer whose sub-layers read from and write to the n streams x = H."""

    pre_norm = True
    #: the module of one sub-layer's connections (Manifold-constrained HC replaces it)
    connection_cls = HyperConnection

    def setup_layer(self, cfg, decoder):
        super().setup_layer(cfg, decoder)
        names = ["self_attn"] + (["encoder_attn"] if decoder and self.encoder_attn is not None else []) + ["ffn"]
        dynamic = not getattr(cfg, "hc_static", False)
        self.hyper_connections = nn.ModuleDict(
            {name: self.connection_cls(self.embed_dim, int(cfg.hc_streams), dynamic) for name in names}
        )

    def sublayer_input(self, sublayer, x, stream):
        # x is H; the sub-layer keeps its Pre-LN LayerNorm on what it reads
        h, coefficients = self.connection(sublayer).read(x)
        return self.sublayer_norm(sublayer)(h), coefficients

    def residual_sum(self, sublayer, x, residual, block_input, stream):
        # x is T_k(h) after dropout, residual is H, stream the coefficients of this sub-layer's read
        return self.connection(sublayer).write(x, residual, stream), None

    def connection(self, sublayer: str) -> Any:
        """The connections of ``sublayer`` (a ``connection_cls``)."""
        return self.hyper_connections[sublayer]


class HyperConnectionEncoderLayer(HyperConnectionLayer, SublayerEncoderLayer):
    pass


class HyperConnectionDecoderLayer(HyperConnectionLayer, SublayerDecoderLayer):
    pass


class StreamSumOutput(nn.LayerNorm):
    """Top of a Hyper-Connections stack: y = LN(sum_i h_i). A LayerNorm subclass, so its parameters are the
    stack's ``layer_norm.weight`` / ``.bias`` as in fairseq's Pre-LN models; it also holds the stack's n."""

    def __init__(self, embed_dim: int, streams: int):
        super().__init__(embed_dim)
        self.streams = int(streams)

    def forward(self, streams: Tensor) -> Tensor:
        return super().forward(streams.sum(dim=-2))


class HyperConnections(SublayerScheme):
    name = "hc"
    summary = "Hyper-Connections: n residual streams, each sub-layer reads A_m^T H and writes B^T T(h) + A_r^T H"
    normalize_before = True
    encoder_layer_cls = HyperConnectionEncoderLayer
    decoder_layer_cls = HyperConnectionDecoderLayer

    def validate(self, cfg):
        if int(cfg.hc_streams) < 1:
            raise ConfigError(f"--hc-streams must be a positive number of residual streams, got {cfg.hc_streams}")

    def build_stack_output(self, fairseq_default, embed_dim, cfg):
        return StreamSumOutput(embed_dim, cfg.hc_streams)

    def start(self, stack, x):
        """H_0: the embedding copied into each of the n streams, (time, batch, n, C), one contiguous tensor: the
        first sub-layer's matrix products would copy a broadcast view themselves, and its norm read it strided."""
        n = stack.layer_norm.streams
        return x.unsqueeze(-2).expand(*x.shape[:-1], n, x.shape[-1]).contiguous()

    def hidden_state(self, carry):
        return carry.sum(dim=-2)

    def initialize(self, model, cfg):
        # A_m = e_{k mod n} needs k, the sub-layer's index along its stack
        for stack in (model.encoder, model.decoder):
            index = 0
            for layer in stack_layers(stack):
                for connection in layer.hyper_connections.values():
                    connection.start_at(index)
                    index += 1
