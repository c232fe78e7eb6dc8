"""The ``residual_transformer`` model: fairseq's Transformer with a pluggable residual scheme.

Only three factory points of fairseq's transformer are overridden: which layer
class each stack builds, the module at the top of each stack, and the
``normalize_before`` flags; the scheme's ``initialize`` then sees the built model
once. See ``schemes/`` for the schemes themselves.
"""

import logging
import math

import torch
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model
from fairseq.models.transformer import (
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModelBase,
)
from fairseq.modules.checkpoint_activations import checkpoint_wrapper

from .config import ResidualTransformerConfig, to_transformer_config
from .errors import ArchitectureMismatchError, CheckpointMismatchError, ConfigError
from .schemes import get_scheme

logger = logging.getLogger(__name__)

#: state-dict key of the buffer that records the scheme a checkpoint was trained with
SCHEME_KEY = "residual_scheme_tag"
_TAG_LENGTH = 32


def _scheme_tag(name: str) -> torch.Tensor:
    codes = list(name.encode("ascii"))[:_TAG_LENGTH]
    return torch.tensor(codes + [0] * (_TAG_LENGTH - len(codes)), dtype=torch.long)


def _scheme_from_tag(tag: torch.Tensor) -> str:
    return bytes(int(c) for c in tag.tolist() if int(c) != 0).decode("ascii", "replace")


def _wrap_layer(layer, cfg):
    """Activation checkpointing and FSDP wrapping, as fairseq's own build_*_layer do."""
    if cfg.checkpoint_activations:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params_to_wrap = cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0
    return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


def _hidden_states(scheme, carried, embed_dim):
    return [scheme.hidden_state(state, embed_dim) for state in carried]


class ResidualTransformerEncoder(TransformerEncoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        self.scheme = get_scheme(cfg.residual_scheme)
        self.layer_norm = self.scheme.build_stack_output(self.layer_norm, embed_tokens.embedding_dim, cfg)

    def forward_scriptable(self, src_tokens, src_lengths=None, return_all_hiddens=False, token_embeddings=None):
        """fairseq's forward; ``encoder_states`` as the scheme records them (embed_dim wide)."""
        out = super().forward_scriptable(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        out["encoder_states"] = _hidden_states(self.scheme, out["encoder_states"], self.embed_tokens.embedding_dim)
        return out

    def build_encoder_layer(self, cfg):
        layer_cls = get_scheme(cfg.residual_scheme).encoder_layer_cls
        return _wrap_layer(layer_cls(cfg, return_fc=self.return_fc), cfg)


class ResidualTransformerDecoder(TransformerDecoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(
            cfg,
            dictionary,
            embed_tokens,
            no_encoder_attn=no_encoder_attn,
            output_projection=output_projection,
        )
        self.scheme = get_scheme(cfg.residual_scheme)
        self.layer_norm = self.scheme.build_stack_output(self.layer_norm, embed_tokens.embedding_dim, cfg)

    def extract_features_scriptable(self, prev_output_tokens, encoder_out, incremental_state=None, *args, **kwargs):
        """fairseq's; ``inner_states`` as the scheme records them (embed_dim wide)."""
        x, extra = super().extract_features_scriptable(
            prev_output_tokens, encoder_out, incremental_state, *args, **kwargs
        )
        extra["inner_states"] = _hidden_states(self.scheme, extra["inner_states"], self.embed_dim)
        return x, extra

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        layer_cls = get_scheme(cfg.residual_scheme).decoder_layer_cls
        return _wrap_layer(layer_cls(cfg, no_encoder_attn), cfg)


def validate_config(cfg):
    """Reject option combinations that would otherwise fail deep inside fairseq."""
    scheme = get_scheme(cfg.residual_scheme)
    for side in ("encoder", "decoder"):
        sub = getattr(cfg, side)
        if sub.embed_dim % sub.attention_heads != 0:
            raise ConfigError(
                f"--{side}-embed-dim {sub.embed_dim} is not divisible by "
                f"--{side}-attention-heads {sub.attention_heads}; choose a head count "
                f"that divides the embedding size (e.g. {_divisor_hint(sub.embed_dim)})"
            )
        if sub.normalize_before and not scheme.normalize_before:
            raise ConfigError(
                f"--{side}-normalize-before contradicts --residual-scheme {scheme.name}; "
                "drop the flag (use --residual-scheme pre for the Pre-LN baseline)"
            )
    if not (math.isfinite(cfg.dual_stream_scale) and cfg.dual_stream_scale > 0):
        raise ConfigError(f"--dual-stream-scale must be a positive finite number, got {cfg.dual_stream_scale}")


def validate_dictionaries(cfg, task):
    """fairseq's own check raises a bare ValueError; this one names the option that makes a joined dictionary."""
    if cfg.share_all_embeddings and task.source_dictionary != task.target_dictionary:
        data = getattr(getattr(task, "cfg", None), "data", "the data folder")
        raise ConfigError(
            f"--share-all-embeddings needs one dictionary for both languages, but {data} has separate "
            "source and target dictionaries: binarise it with fairseq-preprocess --joined-dictionary "
            "(the data-prep/ scripts do), or drop --share-all-embeddings"
        )


def _divisor_hint(dim):
    return ", ".join(str(h) for h in (4, 8, 16) if dim % h == 0) or "1"


@register_model("residual_transformer", dataclass=ResidualTransformerConfig)
class ResidualTransformerModel(TransformerModelBase):
    """fairseq Transformer whose residual wiring is chosen by ``--residual-scheme``."""

    def __init__(self, cfg, encoder, decoder):
        super().__init__(cfg, encoder, decoder)
        self.register_buffer(SCHEME_KEY, _scheme_tag(str(cfg.residual_scheme)))

    @classmethod
    def add_args(cls, parser):
        # flat flags from the dataclass; no defaults in the parser so that the
        # --arch presets can fill in what the user did not set
        gen_parser_from_dataclass(parser, ResidualTransformerConfig(), delete_default=True)

    @classmethod
    def build_model(cls, cfg, task):
        cfg = to_transformer_config(cfg)
        validate_config(cfg)
        validate_dictionaries(cfg, task)
        scheme = get_scheme(cfg.residual_scheme)
        cfg.encoder.normalize_before = scheme.normalize_before
        cfg.decoder.normalize_before = scheme.normalize_before
        model = super().build_model(cfg, task)
        scheme.initialize(model, cfg)
        return model

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return ResidualTransformerEncoder(cfg, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        return ResidualTransformerDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)

    @property
    def residual_scheme(self) -> str:
        return _scheme_from_tag(getattr(self, SCHEME_KEY))

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        expected = self.residual_scheme
        if SCHEME_KEY not in state_dict:
            raise ArchitectureMismatchError(
                f"this checkpoint was not written by residual_transformer (it has no '{SCHEME_KEY}'), "
                f"but this model is residual_transformer --residual-scheme {expected}: load it with the "
                "architecture that trained it, or train a residual_transformer model from scratch"
            )
        found = _scheme_from_tag(state_dict[SCHEME_KEY])
        if found != expected:
            raise CheckpointMismatchError(
                f"checkpoint was trained with --residual-scheme {found} but this model "
                f"uses --residual-scheme {expected}; pass --residual-scheme {found} or "
                "start from a checkpoint of the same scheme"
            )
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
