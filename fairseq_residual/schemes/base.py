"""What a residual scheme is, as the rest of the plugin sees it.

A scheme decides four things and nothing else:

* whether fairseq's layers put LayerNorm on the sub-layer input (Pre-LN) or after
  the residual sum (Post-LN) -- fairseq's own ``normalize_before`` flag;
* which encoder/decoder layer classes to build (fairseq's own ones unless the
  scheme changes how sub-layer outputs are combined);
* the module at the top of each stack (fairseq's ``layer_norm`` attribute, applied
  once after the last layer);
* anything it must do once to a freshly built model (``initialize``: depth-dependent
  initialisation that needs the whole model, per-layer values that need the layer's
  index, state kept in the checkpoint);
* if it carries more than the hidden state between layers (ResiDual's two paths), the
  hidden state fairseq records (``hidden_state``).

Everything else (embeddings, attention, FFN, incremental decoding, beam search)
is fairseq's code, shared by all schemes.
"""

from typing import List, Optional

from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import Tensor, nn


class ResidualScheme:
    """Base class: the Post-LN wiring of Vaswani et al. (2017), fairseq's default."""

    #: name used by ``--residual-scheme`` and recorded in checkpoints
    name: str = ""
    #: one-line description for ``--help`` and the README's scheme table
    summary: str = ""
    #: fairseq's ``normalize_before``: LN on the sub-layer input (True) or after the sum
    normalize_before: bool = False
    encoder_layer_cls = TransformerEncoderLayerBase
    decoder_layer_cls = TransformerDecoderLayerBase

    def build_stack_output(self, fairseq_default: Optional[nn.Module], embed_dim: int, cfg) -> Optional[nn.Module]:
        """Module applied once after the last layer of a stack.

        ``fairseq_default`` is what fairseq built for the scheme's
        ``normalize_before`` setting (a final LayerNorm for Pre-LN, None for Post-LN).
        """
        return fairseq_default

    def hidden_state(self, carried: Tensor, embed_dim: int) -> Tensor:
        """The hidden state recorded for what fairseq's layer loop ``carried`` into or out of a layer.

        fairseq's ``encoder_states`` (``return_all_hiddens``) and the decoder's ``inner_states``
        list the embedding and then every layer's output, before the stack-top module. Every
        scheme records embed_dim-wide states: the output of the layer's last sub-layer, i.e.
        its last LayerNorm for Post-LN wirings and the residual stream for Pre-LN ones. The
        default: what the loop carries is that state.
        """
        return carried

    def initialize(self, model, cfg) -> None:
        """Called once on every freshly built model, before a checkpoint (if any) is loaded.

        ``cfg`` is fairseq's nested TransformerConfig (``cfg.encoder.layers`` ...).
        Buffers registered here are part of the state dict, so they travel with
        checkpoints. The default does nothing.
        """


class SchemeLayer:
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


class SublayerAwareLayer(SchemeLayer):
    """Mixin for a fairseq layer whose residual sum depends on which sub-layer it closes.

    fairseq's layer ``forward`` calls ``residual_connection(x, residual)`` once per
    sub-layer, in a fixed order: ``self_attn``, ``encoder_attn`` (decoder layers, when
    an encoder output is given) and ``ffn``. This mixin's ``forward`` records that
    order and the block's input, so that a scheme implements

        combine(sublayer, x, residual)    x: post-dropout sub-layer output,
                                          residual: that sub-layer's input (Post-LN)

    with ``self.block_input`` (the layer's input x_l) available while it runs.
    Put it before the fairseq layer class in the bases.
    """

    block_input = None
    _sublayers = None

    def sublayer_names(self, args, kwargs) -> List[str]:
        names = ["self_attn"]
        if getattr(self, "encoder_attn", None) is not None:
            encoder_out = args[0] if args else kwargs.get("encoder_out")
            if encoder_out is not None:
                names.append("encoder_attn")
        return names + ["ffn"]

    def forward(self, x, *args, **kwargs):
        self.block_input, self._sublayers = x, iter(self.sublayer_names(args, kwargs))
        try:
            return super().forward(x, *args, **kwargs)
        finally:
            self.block_input = self._sublayers = None

    def residual_connection(self, x, residual):
        return self.combine(next(self._sublayers), x, residual)

    def combine(self, sublayer: str, x, residual):
        raise NotImplementedError


def stack_layers(stack) -> List[nn.Module]:
    """A stack's layers in order, unwrapped from FSDP; by index, because fairseq's LayerDrop
    list skips layers at random when iterated in training mode (a fresh model is)."""
    return [unwrapped_layer(stack.layers[i]) for i in range(len(stack.layers))]


def unwrapped_layer(layer: nn.Module) -> nn.Module:
    """The scheme's layer itself. fairscale's FSDP holds it inside a FlattenParamsWrapper
    (``layer.module.module``); one level of unwrapping would return that wrapper, on which an
    attribute set by a scheme (Admin's ``omega_profile``) never reaches the layer's forward, and
    whose forward hooks (DLCL's) run before it re-creates the layer's parameter views."""
    inner = getattr(layer, "module", None)
    while isinstance(inner, nn.Module):
        layer, inner = inner, getattr(inner, "module", None)
    return layer
