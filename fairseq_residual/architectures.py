"""Named presets (``--arch``) for the paper's model sizes.

``--arch residual_transformer`` itself is the Transformer-base width
(512/2048/8 heads, 6+6 layers, dropout 0.1), from the dataclass defaults.
Depth is not part of a preset: set it with ``--encoder-layers`` / ``--decoder-layers``
(6, 12 or 18 in the paper's tables). Every preset uses the options' defaults
for what it does not name, and a value given on the command line always wins.
"""

from fairseq.models import register_model_architecture

from . import model  # noqa: F401  (registers residual_transformer, which the presets extend)


def _default(args, name, value):
    if getattr(args, name, None) is None:
        setattr(args, name, value)


def _width(args, embed_dim, ffn_dim, heads):
    for side in ("encoder", "decoder"):
        _default(args, f"{side}_embed_dim", embed_dim)
        _default(args, f"{side}_ffn_embed_dim", ffn_dim)
        _default(args, f"{side}_attention_heads", heads)


@register_model_architecture("residual_transformer", "residual_transformer_iwslt_de_en")
def residual_transformer_iwslt_de_en(args):
    """IWSLT-14 setting of the paper: 256/1024/4 heads, dropout 0.3 / 0.1 / 0.1."""
    _width(args, 256, 1024, 4)
    _default(args, "dropout", 0.3)
    _default(args, "attention_dropout", 0.1)
    _default(args, "activation_dropout", 0.1)


@register_model_architecture("residual_transformer", "residual_transformer_wmt_en_de")
def residual_transformer_wmt_en_de(args):
    """WMT'14 setting of the paper: 512/2048/8 heads, dropout 0.3 / 0.1 / 0.1."""
    _width(args, 512, 2048, 8)
    _default(args, "dropout", 0.3)
    _default(args, "attention_dropout", 0.1)
    _default(args, "activation_dropout", 0.1)


@register_model_architecture("residual_transformer", "residual_transformer_opus100")
def residual_transformer_opus100(args):
    """OPUS-100 setting of the paper: 512/2048/8 heads, 18+18 layers, dropout 0.1,
    256 positions, dual-stream scale 0.05 (fp16)."""
    _width(args, 512, 2048, 8)
    _default(args, "encoder_layers", 18)
    _default(args, "decoder_layers", 18)
    _default(args, "dropout", 0.1)
    _default(args, "attention_dropout", 0.1)
    _default(args, "activation_dropout", 0.1)
    _default(args, "max_source_positions", 256)
    _default(args, "max_target_positions", 256)
    _default(args, "dual_stream_scale", 0.05)
