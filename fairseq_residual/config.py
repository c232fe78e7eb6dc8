"""The model's options: fairseq's TransformerConfig, flattened, plus the scheme options.

fairseq's ``TransformerConfig`` nests ``encoder`` / ``decoder`` / ``quant_noise``
sub-configs. fairseq only ever registers it through the legacy argparse model,
and its argparse-to-hydra conversion cannot handle the nesting for a model
registered with a dataclass (it emits ``model.encoder=<class ...>``). So the
options are exposed flat -- ``encoder_embed_dim``, ``decoder_layers`` ... exactly
the names of fairseq's ``--encoder-embed-dim`` style flags -- in one dataclass
generated field by field from fairseq's own (same types, defaults and help), so
nothing is copied by hand and both ``fairseq-train`` flags and hydra YAML work.
``to_transformer_config`` turns it back into fairseq's nested config for the
encoder/decoder classes.
"""

import dataclasses
from argparse import Namespace
from dataclasses import MISSING, field, fields, make_dataclass
from typing import Any, Dict, List, Tuple, cast

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models.transformer import TransformerConfig
from fairseq.models.transformer.transformer_config import (
    DecoderConfig,
    EncDecBaseConfig,
    QuantNoiseConfig,
)
from omegaconf import II, DictConfig, OmegaConf

from .compiled_training import FIELDS as COMPILE_FIELDS
from .schemes import SCHEMES
from .schemes.mix_ln import DEFAULT_RATIO as MIX_LN_DEFAULT_RATIO

_NESTED = {"encoder": EncDecBaseConfig, "decoder": DecoderConfig, "quant_noise": QuantNoiseConfig}


def _copy_field(name, f, default=MISSING):
    kwargs: Dict[str, Any] = {"metadata": dict(f.metadata)}
    if default is not MISSING:
        kwargs["default"] = default
    elif f.default_factory is not MISSING:
        kwargs["default_factory"] = f.default_factory
    else:
        kwargs["default"] = f.default
    return (name, f.type, field(**kwargs))


def _flat_transformer_fields():
    out = []
    for f in fields(TransformerConfig):
        sub = _NESTED.get(f.name)
        if sub is None:
            out.append(_copy_field(f.name, f))
            continue
        for g in fields(sub):
            name = f"{f.name}_{g.name}"
            if name in ("decoder_input_dim", "decoder_output_dim"):
                # fairseq's nested default points at model.decoder.embed_dim
                out.append(_copy_field(name, g, default=II("model.decoder_embed_dim")))
            else:
                out.append(_copy_field(name, g))
    return out


# (name, type, dataclasses.Field) specs for make_dataclass; typeshed types ``field()`` as its default's
# type (for class bodies), hence Any for the Field here
_SCHEME_FIELDS: List[Tuple[str, Any, Any]] = [
    (
        "residual_scheme",
        ChoiceEnum(list(SCHEMES)),
        field(
            default="residual",
            metadata={
                "help": "how sub-layer outputs are combined: "
                + "; ".join(f"{s.name} = {s.summary}" for s in SCHEMES.values())
            },
        ),
    ),
    (
        "dual_stream_scale",
        float,
        field(
            default=1.0,
            metadata={
                "help": "ResiDual only: constant s multiplying what is added to the dual "
                "stream x^d (keeps x^d inside fp16 range in deep models; the authors use "
                "0.05 for OPUS-100 and 1.0 elsewhere); LN is scale invariant, so the "
                "function does not depend on s beyond LN's epsilon"
            },
        ),
    ),
    (
        "mix_ln_ratio",
        float,
        field(
            default=MIX_LN_DEFAULT_RATIO,
            metadata={
                "help": "Mix-LN only: alpha in [0, 1]; the first floor(alpha * L) layers of each stack of L layers "
                "are Post-LN, the rest Pre-LN (the paper's 0.25; 0 is Pre-LN, 1 Post-LN with a final LN)"
            },
        ),
    ),
    (
        "hc_streams",
        int,
        field(
            default=4,
            metadata={
                "help": "Hyper-Connections (hc, mhc) only: n, the number of residual streams the hidden state is "
                "expanded into (the papers use 4)"
            },
        ),
    ),
    (
        "hc_static",
        bool,
        field(
            default=False,
            metadata={
                "help": "hc only: static Hyper-Connections (learned A_m, A_r, B shared by all tokens), without the "
                "dynamic, input-dependent part s * tanh(norm(H) W)"
            },
        ),
    ),
    (
        "attn_res_blocks",
        int,
        field(
            default=0,
            metadata={
                "help": "attn-res only: N, the number of equal blocks each stack's layers form (Block Attention "
                "Residuals: a sub-layer attends over the embedding, the earlier blocks' sums and its own block's sum "
                "so far; N divides the encoder's and the decoder's depth, the paper's ~8); 0 attends over every "
                "earlier sub-layer's output (Full Attention Residuals)"
            },
        ),
    ),
    (
        "residual_output_alpha",
        float,
        field(
            default=1.0,
            metadata={
                "help": "ResiDual schemes only: weight alpha of the Post-LN term of each stack's output, "
                "y = alpha * x^ln + LN(x^d) (the authors' enc_alpha = dec_alpha; 1.0 in their configs)"
            },
        ),
    ),
    (
        "residual_output_scale",
        float,
        field(
            default=1.0,
            metadata={
                "help": "ResiDual schemes only: initial gain c of both LayerNorms that form each stack's output "
                "y (the last layer's final LayerNorm, giving x^ln, and the LN of x^d), so y starts c times "
                "its default size; the gains stay learnable. 1.0 is the authors' initialisation; 0.5 starts y "
                "at about a Pre-LN stack's output size (docs/schemes.md)"
            },
        ),
    ),
]

ResidualTransformerConfig = make_dataclass(
    "ResidualTransformerConfig",
    _flat_transformer_fields() + _SCHEME_FIELDS + COMPILE_FIELDS,
    bases=(FairseqDataclass,),
)
ResidualTransformerConfig.__module__ = __name__
ResidualTransformerConfig.__doc__ = "Options of ``--arch residual_transformer`` (flat names)."


def flat_values(cfg) -> Dict[str, Any]:
    """The options of ``cfg`` (Namespace, DictConfig or dataclass) as a plain dict, interpolations resolved."""
    if isinstance(cfg, DictConfig):
        return cast(Dict[str, Any], OmegaConf.to_container(cfg, resolve=True))
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return dataclasses.asdict(cfg)
    return dict(vars(cfg))


def to_transformer_config(cfg) -> TransformerConfig:
    """fairseq's nested TransformerConfig from the flat options (Namespace, DictConfig or dataclass).

    Keys that TransformerConfig does not declare (``residual_scheme`` ...) are kept
    as attributes, as fairseq does for the legacy transformer.
    """
    values = flat_values(cfg)
    defaults = {name: f.default for name, _, f in _SCHEME_FIELDS + COMPILE_FIELDS}
    for key, value in defaults.items():
        values.setdefault(key, value)
    embed = values.get("decoder_embed_dim") or 512
    for key in ("decoder_input_dim", "decoder_output_dim"):
        if values.get(key) is None or isinstance(values.get(key), str):
            values[key] = embed
    values["residual_scheme"] = str(values["residual_scheme"])
    return TransformerConfig.from_namespace(Namespace(**values))
