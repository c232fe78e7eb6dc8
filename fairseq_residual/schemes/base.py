"""What a residual scheme is, as the rest of the plugin sees it.

A scheme decides:

* whether fairseq's layers put LayerNorm on the sub-layer input (Pre-LN) or after
  the residual sum (Post-LN) -- fairseq's own ``normalize_before`` flag;
* which encoder/decoder layer classes to build (fairseq's own ones unless the
  scheme changes how sub-layer outputs are combined);
* the module at the top of each stack (fairseq's ``layer_norm`` attribute);
* what a stack's layer loop carries from one layer to the next (``start``, ``step``,
  ``finish``, ``hidden_state``): the hidden state for most schemes, ResiDual's two
  paths, DLCL's history of layer outputs;
* anything it must do once to a freshly built model (``initialize``).

Where a forward pass keeps its state: in local variables and arguments only. The stacks'
layer loops (``model.py``: the encoder's ``forward_scriptable``, the decoder's
``extract_features_scriptable``) hold the scheme's *carry* in a local and hand it to
``step`` for every layer; a layer that needs per-call values inside its sub-layers
(``SublayerEncoderLayer`` / ``SublayerDecoderLayer``) receives them as the ``stream``
argument and returns them. Modules hold parameters, buffers and configuration, never a
value of one call, so one model serves several threads, ``torch.compile`` traces it and
activation checkpointing re-runs a layer from its arguments alone.

Everything else (embeddings, attention, FFN, incremental decoding, beam search)
is fairseq's code, shared by all schemes.
"""

from typing import TYPE_CHECKING, Any, List, Optional, Tuple

import torch
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import Tensor, nn

from ..errors import ConfigError


def split_layer_output(out) -> Tuple[Tensor, tuple]:
    """(x, the rest) of a fairseq layer's output: x alone, (x, fc_result) or (x, attn, state)."""
    if isinstance(out, tuple):
        return out[0], out[1:]
    return out, ()


class ResidualScheme:
    """Base class: the Post-LN wiring of Vaswani et al. (2017), fairseq's default.

    The carry of the default is the hidden state itself, so a stack's loop is fairseq's:
    ``x = layer(x, ...)`` for every layer, then the stack-top module.
    """

    #: name used by ``--residual-scheme`` and recorded in checkpoints
    name: str = ""
    #: one-line description for ``--help`` and the README's scheme table
    summary: str = ""
    #: fairseq's ``normalize_before``: LN on the sub-layer input (True) or after the sum
    normalize_before: bool = False
    encoder_layer_cls = TransformerEncoderLayerBase
    decoder_layer_cls = TransformerDecoderLayerBase
    #: whether the stack output is ResiDual's y = alpha * x^ln + LN(x^d), which --residual-output-alpha and
    #: --residual-output-scale shape (anything else rejects them but at their defaults)
    dual_output: bool = False

    def build_stack_output(self, fairseq_default: Optional[nn.Module], embed_dim: int, cfg) -> Optional[nn.Module]:
        """Module applied once after the last layer of a stack.

        ``fairseq_default`` is what fairseq built for the scheme's
        ``normalize_before`` setting (a final LayerNorm for Pre-LN, None for Post-LN).
        """
        return fairseq_default

    def start(self, stack: Any, x: Tensor) -> Any:
        """The carry entering the first layer of ``stack``, from its embedding ``x`` (time, batch, embed_dim)."""
        return x

    def step(self, layer: nn.Module, carry: Any, **kwargs) -> Tuple[Any, tuple]:
        """Run one layer on the carry (fairseq's arguments after x, by name): (new carry, the layer's other
        outputs). Whatever a layer needs goes in as arguments, tensors as such (fairseq's activation
        checkpointing saves and recomputes the layer from its tensor arguments; FSDP gathers a layer's
        parameters only inside its call)."""
        return split_layer_output(layer(carry, **kwargs))

    def hidden_state(self, carry: Any) -> Tensor:
        """The hidden state recorded for a carry, embed_dim wide.

        fairseq's ``encoder_states`` (``return_all_hiddens``) and the decoder's ``inner_states``
        list the embedding and then what every layer hands to the next, before the stack-top
        module: the output of the layer's last sub-layer, i.e. its last LayerNorm for Post-LN
        wirings and the residual stream for Pre-LN ones.
        """
        return carry

    def finish(self, stack: Any, carry: Any) -> Tensor:
        """The stack's output from the carry after its last layer (through the stack-top module, if any)."""
        return carry if stack.layer_norm is None else stack.layer_norm(carry)

    def validate(self, cfg) -> None:
        """Reject the scheme's own options when they make no sense (a one-line ConfigError); ``cfg`` is
        fairseq's nested TransformerConfig. The default accepts everything."""

    def initialize(self, model, cfg) -> None:
        """Called once on every freshly built model, before a checkpoint (if any) is loaded.

        ``cfg`` is fairseq's nested TransformerConfig (``cfg.encoder.layers`` ...).
        Buffers registered here are part of the state dict, so they travel with
        checkpoints. The default does nothing.
        """


class SublayerScheme(ResidualScheme):
    """A scheme whose layers are ``SublayerLayer``s and whose carry is the hidden state (B2T, Admin):
    each layer gets ``stream=None`` (Admin's one-time profiling puts its profile there)."""

    def step(self, layer, carry, **kwargs):
        x, rest, _ = call_with_stream(layer, carry, None, **kwargs)
        return x, rest


if TYPE_CHECKING:
    # what the mixins extend: a fairseq layer (type checking sees its modules and attributes)
    from fairseq.modules.transformer_layer import TransformerEncoderLayerBase as FairseqLayer
else:
    FairseqLayer = object


class SchemeLayer(FairseqLayer):
    """Mixin for a scheme's layer classes: fairseq builds the layer, then ``setup_layer``
    adds what the scheme needs to it.

    One mixin serves both stacks: ``class XEncoderLayer(XLayer, TransformerEncoderLayerBase)``
    and ``class XDecoderLayer(XLayer, TransformerDecoderLayerBase)``, with no constructor of
    their own; fairseq's constructor arguments pass through unchanged.
    """

    def __init__(self, cfg, *args, **kwargs):
        super().__init__(cfg, *args, **kwargs)
        self.setup_layer(cfg, decoder=isinstance(self, TransformerDecoderLayerBase))

    def setup_layer(self, cfg, decoder: bool) -> None:
        """Called once at the end of the constructor; ``decoder``: which stack the layer is in
        (``cfg`` is fairseq's nested TransformerConfig). The default does nothing."""

    def setup_position(self, index: int) -> None:
        """Called once when the stack has built all its layers, before it wraps them (activation checkpointing,
        FSDP): ``index`` is the layer's position in its stack, from 0. fairseq builds a stack's layers without
        saying which is which; a layer whose constants or modules depend on its position (Keel's first layer,
        SiameseNorm's depth factor) sets them here, where FSDP has not yet flattened its parameters. The default
        does nothing."""


class SublayerLayer(SchemeLayer):
    """Mixin for a layer whose residual sum, or the input of its sub-layers, depends on the sub-layer
    or on values of the current call (ResiDual's dual path, B2T's block input, Admin's profile,
    Hyper-Connections' n streams).

    fairseq's layer ``forward`` closes each sub-layer with ``residual_connection(x, residual)``,
    which has no way to receive such values. ``SublayerEncoderLayer`` / ``SublayerDecoderLayer``
    write the same forward sub-layer by sub-layer instead: each sub-layer reads

        sublayer_input(sublayer, x, stream) -> (h, stream)

    (by default fairseq's: LN(x) in Pre-LN, x itself in Post-LN) and is closed with

    x: the sub-layer's output after dropout, residual: the stream it reads (its input in Post-LN,
    the un-normalised stream whose LN is its input in Pre-LN), block_input: the layer's input,
    stream: what the scheme's ``step`` passed in (returned as the layer's last output, updated).
    The sub-layers run self-attention, cross-attention (decoder, given an encoder output), FFN;
    fairseq's LayerNorm follows each sum (Post-LN) or precedes each sub-layer (``pre_norm``).
    NormFormer's modules (``attn_ln`` on the self-attention's output, ``ffn_layernorm`` after the FFN's
    activation; fairseq's ``--scale-attn`` / ``--scale-fc`` in the decoder) apply where present.
    """

    #: the wiring the layer is written for: LN after each residual sum (Post-LN, False) or on each
    #: sub-layer's input (Pre-LN, True; the scheme's ``normalize_before``)
    pre_norm: bool = False

    def residual_sum(self, sublayer: str, x: Tensor, residual: Tensor, block_input: Tensor, stream):
        raise NotImplementedError

    def sublayer_input(self, sublayer: str, x: Tensor, stream) -> Tuple[Tensor, Any]:
        """What ``sublayer`` computes on (h) and the stream, from the layer's state x before it: fairseq's
        LN(x) in Pre-LN (the sub-layer's own LayerNorm), x in Post-LN (its LN closed the previous sum)."""
        return (self.sublayer_norm(sublayer)(x) if self.normalize_before else x), stream

    def sublayer_norm(self, sublayer: str) -> nn.Module:
        """fairseq's LayerNorm of ``sublayer``: before it in Pre-LN, after its residual sum in Post-LN."""
        return getattr(self, SUBLAYER_NORMS[sublayer])

    def setup_layer(self, cfg, decoder):
        side = cfg.decoder if decoder else cfg.encoder
        if side.normalize_before != self.pre_norm or (decoder and cfg.cross_self_attention):
            wiring = "Pre-LN" if self.pre_norm else "Post-LN"
            raise ConfigError(
                f"this residual scheme writes its own {wiring} layer and supports neither --*-normalize-before "
                "nor --cross-self-attention: drop the option, or use --residual-scheme post/pre"
            )
        if not decoder:  # NormFormer's modules, which fairseq builds in decoder layers only
            self.attn_ln = None
            self.ffn_layernorm = None


#: each sub-layer's LayerNorm in fairseq's layers
SUBLAYER_NORMS = {
    "self_attn": "self_attn_layer_norm",
    "encoder_attn": "encoder_attn_layer_norm",
    "ffn": "final_layer_norm",
}


class PlainSumLayer(SublayerLayer):
    """Mixin: the residual sum x_k + f_k of Post-LN and Pre-LN, for schemes that change what surrounds it."""

    def residual_sum(self, sublayer, x, residual, block_input, stream):
        return residual + x, stream


def call_with_stream(layer: nn.Module, x: Tensor, stream, **kwargs) -> Tuple[Tensor, tuple, Any]:
    """Run a ``SublayerLayer`` on x and ``stream``: (x, the rest of fairseq's outputs, the stream)."""
    out = layer(x, stream=stream, **kwargs)
    return out[0], out[1:-1], out[-1]


class SublayerEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer, forward written sub-layer by sub-layer (see ``SublayerLayer``)."""

    def forward(
        self, x, encoder_padding_mask: Optional[Tensor] = None, attn_mask: Optional[Tensor] = None, stream=None
    ):
        if attn_mask is not None:  # as fairseq: masked positions get a large negative score, not -inf
            attn_mask = attn_mask.masked_fill(attn_mask.to(torch.bool), -1e8 if x.dtype == torch.float32 else -1e4)
        block_input, pre = x, self.normalize_before
        h, stream = self.sublayer_input("self_attn", x, stream)
        f, _ = self.self_attn(
            query=h, key=h, value=h, key_padding_mask=encoder_padding_mask, need_weights=False, attn_mask=attn_mask
        )
        if self.attn_ln is not None:
            f = self.attn_ln(f)
        x, stream = self.residual_sum("self_attn", self.dropout_module(f), x, block_input, stream)
        if not pre:
            x = self.self_attn_layer_norm(x)
        h, stream = self.sublayer_input("ffn", x, stream)
        f = self.activation_dropout_module(self.activation_fn(self.fc1(h)))
        if self.ffn_layernorm is not None:
            f = self.ffn_layernorm(f)
        fc_result = self.fc2(f)
        x, stream = self.residual_sum("ffn", self.dropout_module(fc_result), x, block_input, stream)
        if not pre:
            x = self.final_layer_norm(x)
        if self.return_fc:
            return x, fc_result, stream
        return x, stream


class SublayerDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer, forward written sub-layer by sub-layer (see ``SublayerLayer``).

    Returns fairseq's (x, attn, None) followed by the stream. fairseq's decoder loop never passes
    ``prev_self_attn_state`` / ``prev_attn_state`` (incremental state lives in ``incremental_state``).
    """

    def forward(
        self,
        x,
        encoder_out: Optional[Tensor] = None,
        encoder_padding_mask: Optional[Tensor] = None,
        incremental_state=None,
        prev_self_attn_state: Optional[List[Tensor]] = None,
        prev_attn_state: Optional[List[Tensor]] = None,
        self_attn_mask: Optional[Tensor] = None,
        self_attn_padding_mask: Optional[Tensor] = None,
        need_attn: bool = False,
        need_head_weights: bool = False,
        stream=None,
    ):
        if prev_self_attn_state is not None or prev_attn_state is not None:
            raise NotImplementedError("prev_self_attn_state / prev_attn_state: pass the state in incremental_state")
        block_input, pre = x, self.normalize_before
        h, stream = self.sublayer_input("self_attn", x, stream)
        f, attn = self.self_attn(
            query=h,
            key=h,
            value=h,
            key_padding_mask=self_attn_padding_mask,
            incremental_state=incremental_state,
            need_weights=False,
            attn_mask=self_attn_mask,
        )
        if self.c_attn is not None:  # fairseq's --scale-heads
            f = torch.einsum("tbhd,h->tbhd", f.unflatten(-1, (self.nh, self.head_dim)), self.c_attn).flatten(-2)
        if self.attn_ln is not None:  # NormFormer (--scale-attn)
            f = self.attn_ln(f)
        x, stream = self.residual_sum("self_attn", self.dropout_module(f), x, block_input, stream)
        if not pre:
            x = self.self_attn_layer_norm(x)
        if self.encoder_attn is not None and encoder_out is not None:
            h, stream = self.sublayer_input("encoder_attn", x, stream)
            f, attn = self.encoder_attn(
                query=h,
                key=encoder_out,
                value=encoder_out,
                key_padding_mask=encoder_padding_mask,
                incremental_state=incremental_state,
                static_kv=True,
                need_weights=need_attn or need_head_weights or (not self.training and self.need_attn),
                need_head_weights=need_head_weights,
            )
            x, stream = self.residual_sum("encoder_attn", self.dropout_module(f), x, block_input, stream)
            if not pre:
                x = self.encoder_attn_layer_norm(x)
        h, stream = self.sublayer_input("ffn", x, stream)
        f = self.activation_dropout_module(self.activation_fn(self.fc1(h)))
        if self.ffn_layernorm is not None:  # NormFormer (--scale-fc)
            f = self.ffn_layernorm(f)
        residual = x if self.w_resid is None else torch.mul(self.w_resid, x)  # NormFormer (--scale-resids)
        x, stream = self.residual_sum("ffn", self.dropout_module(self.fc2(f)), residual, block_input, stream)
        if not pre:
            x = self.final_layer_norm(x)
        return x, attn, None, stream


def contiguous_gradient(x: Tensor) -> Tensor:
    """x itself, through a 2-D view and back (no copy, the same values), for a stack output that no fused kernel
    closes (T-Fixup's, Keel's). The decoder's output reaches the output projection transposed (batch first), so its
    gradient comes back in that layout; the view's backward copies it into the layers' layout once. Without it each
    sub-layer's backward would copy it again (a LayerNorm at the top makes this copy inside its backward)."""
    return x.flatten(0, 1).view_as(x)


def stack_layers(stack) -> List[Any]:
    """A stack's layers in order, unwrapped from FSDP; by index, because fairseq's LayerDrop
    list skips layers at random when iterated in training mode (a fresh model is)."""
    return [unwrapped_layer(stack.layers[i]) for i in range(len(stack.layers))]


def unwrapped_layer(layer: nn.Module) -> nn.Module:
    """The scheme's layer itself. fairscale's FSDP holds it inside a FlattenParamsWrapper
    (``layer.module.module``); one level of unwrapping would return that wrapper, whose
    attributes are not the layer's."""
    inner = getattr(layer, "module", None)
    while isinstance(inner, nn.Module):
        layer, inner = inner, getattr(inner, "module", None)
    return layer
