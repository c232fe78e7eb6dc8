"""What a residual scheme is, as the rest of the plugin sees it.

A scheme decides three things and nothing else:

* whether fairseq's layers put LayerNorm on the sub-layer input (Pre-LN) or after
  the residual sum (Post-LN) -- fairseq's own ``normalize_before`` flag;
* which encoder/decoder layer classes to build (fairseq's own ones unless the
  scheme changes how sub-layer outputs are combined);
* the module at the top of each stack (fairseq's ``layer_norm`` attribute, applied
  once after the last layer).

Everything else (embeddings, attention, FFN, incremental decoding, beam search)
is fairseq's code, shared by all schemes.
"""
from typing import Optional

from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import nn


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

    def build_stack_output(
        self, fairseq_default: Optional[nn.Module], embed_dim: int, cfg
    ) -> Optional[nn.Module]:
        """Module applied once after the last layer of a stack.

        ``fairseq_default`` is what fairseq built for the scheme's
        ``normalize_before`` setting (a final LayerNorm for Pre-LN, None for Post-LN).
        """
        return fairseq_default
