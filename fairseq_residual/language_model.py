"""The ``residual_transformer_lm`` model: fairseq's Transformer language model with a pluggable residual scheme.

    fairseq-train DATA --task language_modeling --user-dir fairseq_residual \\
        --arch residual_transformer_lm --residual-scheme residual ...

A decoder-only stack: the translation model's decoder (``ResidualTransformerDecoder``, whose layer loop
hands the scheme's carry from layer to layer) built without encoder attention, inside fairseq's
``TransformerLanguageModel`` (its options, presets, ``fairseq-eval-lm``, hub and sampling). Every scheme
of ``schemes.SCHEMES`` works unchanged: the layers are the scheme's decoder layers, the stack top is the
scheme's, and ``initialize`` sees the decoder as a translation model's decoder (``initialize_decoder_only``).

Depth rules. A scheme whose constants depend on the encoder and decoder depths (DeepNet's alpha/beta,
T-Fixup's factors) computes them as it does for a translation model's decoder of the same depth M, with
the encoder's depth read as M too (only the decoder's constants are used). The decoder's rules were
derived for layers with three sub-layers; an LM layer has two. DeepNet's paper gives decoder-only
constants of its own, alpha = (2M)^(1/4), beta = (8M)^(-1/4), against (3M)^(1/4), (12M)^(-1/4) here.
"""

import copy
import dataclasses
from argparse import Namespace
from typing import Any, Dict, List, Tuple

from fairseq.models import ARCH_CONFIG_REGISTRY, register_model, register_model_architecture
from fairseq.models.transformer_lm import (
    DEFAULT_MAX_TARGET_POSITIONS,
    TransformerLanguageModel,
    TransformerLanguageModelConfig,
)
from omegaconf import II
from torch import nn

from . import compiled_training
from .config import _SCHEME_FIELDS, COMPILE_FIELDS, flat_values, to_transformer_config
from .model import (
    SCHEME_KEY,
    ResidualTransformerDecoder,
    ResidualTransformerEncoder,
    _scheme_from_tag,
    _scheme_tag,
    check_scheme_by_converter,
    check_scheme_tag,
    validate_config,
)
from .schemes import get_scheme

MODEL = "residual_transformer_lm"

#: fairseq's ``--decoder-input-dim`` / ``--decoder-output-dim`` default to 512 whatever ``--decoder-embed-dim`` says:
#: ``--decoder-embed-dim 64`` alone built a 512-wide embedding projected to 64 and back (issue 34; 5.86M parameters
#: against 2.20M at 8,016 words, embeddings shared). Here they follow the width unless given, as in fairseq's
#: presets, its nested DecoderConfig and the translation model's options; given explicitly, they build what stock
#: transformer_lm does.
_WIDTH_FOLLOWING = {
    "decoder_input_dim": "the embedding's width (projected to --decoder-embed-dim if it differs)",
    "decoder_output_dim": "the width before the output projection (projected from --decoder-embed-dim if it differs)",
}
_WIDTH_FIELDS: List[Tuple[str, Any, Any]] = [
    (
        f.name,
        f.type,
        dataclasses.field(default=II("model.decoder_embed_dim"), metadata={"help": _WIDTH_FOLLOWING[f.name]}),
    )
    for f in dataclasses.fields(TransformerLanguageModelConfig)
    if f.name in _WIDTH_FOLLOWING
]

ResidualTransformerLanguageModelConfig = dataclasses.make_dataclass(
    "ResidualTransformerLanguageModelConfig",
    _WIDTH_FIELDS + _SCHEME_FIELDS + COMPILE_FIELDS,
    bases=(TransformerLanguageModelConfig,),
)
ResidualTransformerLanguageModelConfig.__module__ = __name__
ResidualTransformerLanguageModelConfig.__doc__ = (
    "Options of ``--arch residual_transformer_lm``: fairseq's transformer_lm ones and the scheme's."
)


def initialize_decoder_only(scheme, decoder: ResidualTransformerDecoder, cfg) -> None:
    """``scheme.initialize`` on a decoder-only model.

    A scheme's ``initialize`` is written for an encoder-decoder model (``model.encoder``, ``model.decoder``).
    It gets the LM's decoder, and an encoder with no layers (and an embedding of its own) built for this call
    and dropped after it: every scheme's rule for the decoder applies unchanged, and what it does to an
    encoder touches nothing of the LM.
    """
    empty = copy.deepcopy(cfg)
    empty.encoder.layers = 0
    empty.encoder.embed_dim = cfg.decoder.embed_dim
    pad = decoder.padding_idx
    embedding = nn.Embedding(pad + 1, cfg.decoder.embed_dim, padding_idx=pad)
    encoder = ResidualTransformerEncoder(empty, decoder.dictionary, embedding)
    scheme.initialize(Namespace(encoder=encoder, decoder=decoder), cfg)


def decoder_only_config(args) -> Dict[str, Any]:
    """The flat options of the LM's decoder: those of ``args``, with the input and output dims following the width
    where not given, what fairseq's ``build_model`` of ``transformer_lm`` fills in, and the encoder's depth equal to
    the decoder's (see the module's doc)."""
    values = flat_values(args)
    for key in _WIDTH_FOLLOWING:  # None or the interpolation's text where no config resolved it
        if values.get(key) is None or isinstance(values.get(key), str):
            values[key] = values["decoder_embed_dim"]
    if values.get("decoder_layers_to_keep"):
        values["decoder_layers"] = len(values["decoder_layers_to_keep"].split(","))
    if values.get("max_target_positions") is None:
        values["max_target_positions"] = values.get("tokens_per_sample") or DEFAULT_MAX_TARGET_POSITIONS
    values["encoder_layers"] = values["decoder_layers"]
    return values


def fairseq_embedding(values: Dict[str, Any], task) -> nn.Module:
    """The token embedding fairseq's ``transformer_lm`` builds for these options (plain, adaptive input or
    character CNN), made by fairseq's own ``build_model`` around a decoder with no layers."""
    shell = dict(values, decoder_layers=0, decoder_layers_to_keep=None)
    return TransformerLanguageModel.build_model(Namespace(**shell), task).decoder.embed_tokens


@register_model(MODEL, dataclass=ResidualTransformerLanguageModelConfig)
class ResidualTransformerLanguageModel(TransformerLanguageModel):
    """fairseq's Transformer language model whose residual wiring is chosen by ``--residual-scheme``."""

    def __init__(self, decoder, scheme: str, compile_options=None):
        super().__init__(decoder)
        self.register_buffer(SCHEME_KEY, _scheme_tag(scheme))
        self.compile_options = compile_options or compiled_training.options_of(None)

    def forward(self, src_tokens, **kwargs):
        """fairseq's forward; in training compiled where ``--torch-compile`` asks (``compiled_training``)."""
        if self.training and self.compile_options["torch_compile"]:
            return compiled_training.training_forward(
                TransformerLanguageModel.forward, self, self.compile_options, src_tokens, **kwargs
            )
        return super().forward(src_tokens, **kwargs)

    @classmethod
    def hub_models(cls):
        return {}  # fairseq's downloadable transformer_lm checkpoints are not residual_transformer_lm ones

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        check_scheme_by_converter(parser)

    @classmethod
    def build_model(cls, args, task):
        values = decoder_only_config(args)
        cfg = to_transformer_config(Namespace(**values))
        validate_config(cfg)
        scheme = get_scheme(cfg.residual_scheme)
        cfg.decoder.normalize_before = scheme.normalize_before
        values["decoder_normalize_before"] = scheme.normalize_before  # the embedding's shell, as the decoder
        embed_tokens = fairseq_embedding(values, task)
        decoder = ResidualTransformerDecoder(cfg, task.target_dictionary, embed_tokens, no_encoder_attn=True)
        initialize_decoder_only(scheme, decoder, cfg)
        return cls(decoder, scheme.name, compiled_training.options_of(cfg))

    @property
    def residual_scheme(self) -> str:
        return _scheme_from_tag(getattr(self, SCHEME_KEY))

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        check_scheme_tag(state_dict, self.residual_scheme, MODEL)
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)


#: fairseq's transformer_lm presets mirrored as ``residual_<name>``: the base width of ``transformer_lm_big``,
#: the GPT family's sizes with GELU, and the tiny one for tests (the adaptive-input wiki103/gbw presets are left
#: out: their vocabulary cutoffs fit those corpora only)
PRESETS = (
    "transformer_lm_big",
    "transformer_lm_gpt",
    "transformer_lm_gpt2_tiny",
    "transformer_lm_gpt2_small",
    "transformer_lm_gpt2_medium",
    "transformer_lm_gpt3_small",
    "transformer_lm_gpt3_medium",
)


def _mirror(preset: str):
    def architecture(args):
        """fairseq's preset of the same name, except ``decoder_normalize_before``: fairseq's presets force it on
        (Pre-LN), here the residual scheme decides it, and a value on the command line is kept for its check."""
        given = getattr(args, "decoder_normalize_before", None)
        ARCH_CONFIG_REGISTRY[preset](args)
        args.decoder_normalize_before = bool(given)

    architecture.__name__ = f"residual_{preset}"
    architecture.__doc__ = f"fairseq's ``{preset}`` sizes; the scheme decides where LayerNorm goes."
    return register_model_architecture(MODEL, f"residual_{preset}")(architecture)


for _preset in PRESETS:
    _mirror(_preset)
