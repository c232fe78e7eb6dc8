"""B2T connection (Takase, Kiyono, Kobayashi, Suzuki 2022/2023, "On Layer Normalizations and
Residual Connections in Transformers", arXiv:2206.00330; Findings of ACL 2023 as
"B2T Connection: Serving Stability and Performance in Deep Transformers").

Post-LN plus one more residual: the block's input x_l skips every LayerNorm of the block
except its last one and is added to the input of that last LN (the bottom-to-top connection):

    encoder:  h       = LN_1(x_l + SelfAttn(x_l))
              x_{l+1} = LN_2(h + FFN(h) + x_l)

    decoder:  h_1     = LN_1(x_l + SelfAttn(x_l))
              h_2     = LN_2(h_1 + CrossAttn(h_1, enc))
              x_{l+1} = LN_3(h_2 + FFN(h_2) + x_l)

so in the decoder x_l bypasses both attention LNs and joins at the FFN's LN.

Choices (authors' code: takase/b2t_connection, ``--residual-bottom-to-top``):

* every layer of both stacks has the connection, the last one included: the released
  ``transformer_layer.py`` adds x_l in all layers and the encoder/decoder loops treat the
  last layer like the others; there is no final LayerNorm beyond the last layer's own.
* initialisation: fairseq's Post-LN default. A later commit of the authors' repository also
  multiplies every non-LN weight inside each B2T layer by L^(-1/2) at init ("rescaling
  parameters for deep transformers"); its first release does not, and neither do we.

Appears in the ResiDual paper's WMT table (E6D6, E18D18).
"""

from .base import SublayerDecoderLayer, SublayerEncoderLayer, SublayerLayer, SublayerScheme


class BottomToTopLayer(SublayerLayer):
    """Mixin: fairseq's Post-LN layer, with the block input x_l added again before the layer's last LN."""

    def residual_sum(self, sublayer, x, residual, block_input, stream):
        # x is the sub-layer output after dropout, residual its (Post-LN) input
        if sublayer == "ffn":
            return residual + x + block_input, stream
        return residual + x, stream


class B2TEncoderLayer(BottomToTopLayer, SublayerEncoderLayer):
    pass


class B2TDecoderLayer(BottomToTopLayer, SublayerDecoderLayer):
    pass


class B2T(SublayerScheme):
    name = "b2t"
    summary = "B2T connection: Post-LN plus the block input added before the block's last LN"
    normalize_before = False
    encoder_layer_cls = B2TEncoderLayer
    decoder_layer_cls = B2TDecoderLayer
