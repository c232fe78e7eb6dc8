"""The ``residual_transformer`` model: fairseq's Transformer with a pluggable residual scheme.

Overridden from fairseq's transformer: which layer class each stack builds (each layer told its
position before it is wrapped, ``place_layers``), the module at the top of each stack, the
``normalize_before`` flags, and each stack's layer loop, which hands the scheme's carry from one
layer to the next in a local variable (``ResidualScheme.start``, ``step``, ``finish``); everything
around the loop (embeddings, masks, LayerDrop, alignment, incremental state) is fairseq's code.
The scheme's ``initialize`` then sees the built model once. See ``schemes/`` for the schemes
themselves, and docs/architecture.md.
"""

import logging
import math
from typing import List, Optional

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
from torch import Tensor, nn

from . import compiled_training
from .config import ResidualTransformerConfig, to_transformer_config
from .errors import ArchitectureMismatchError, CheckpointMismatchError, ConfigError, OptionError
from .schemes import SCHEMES, UnknownSchemeError, get_scheme
from .schemes.base import SchemeLayer

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


def place_layers(stack, cfg) -> None:
    """Tell each layer of ``stack`` its position (``SchemeLayer.setup_position``), then wrap it (``_wrap_layer``).

    fairseq's constructor builds the layers one ``build_*_layer`` call at a time, without their index; they are
    wrapped here instead, once all exist, so that a layer may still add or drop modules for its position."""
    for index in range(len(stack.layers)):  # by index: a LayerDrop list skips layers when iterated in training
        layer = stack.layers[index]
        if isinstance(layer, SchemeLayer):
            layer.setup_position(index)
        stack.layers[index] = _wrap_layer(layer, cfg)


def future_mask(x: Tensor) -> Tensor:
    """The decoder's causal self-attention mask for ``x`` (time first), -inf above the diagonal.

    fairseq's ``buffered_future_mask`` caches it on the decoder (an attribute written during the
    forward, which two threads race on); this is the same mask, made for the call on ``x``'s device
    and in its dtype (made on the host and moved, it would be a blocking copy in every GPU step).
    """
    dim = x.size(0)
    return torch.full((dim, dim), float("-inf"), dtype=x.dtype, device=x.device).triu_(1)  # two kernels


class ResidualTransformerEncoder(TransformerEncoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        place_layers(self, cfg)
        self.scheme = get_scheme(cfg.residual_scheme)
        self.layer_norm: Optional[nn.Module] = self.scheme.build_stack_output(
            self.layer_norm, embed_tokens.embedding_dim, cfg
        )

    def forward_scriptable(self, src_tokens, src_lengths=None, return_all_hiddens=False, token_embeddings=None):
        """fairseq's encoder forward, whose layer loop hands the scheme's carry from layer to layer
        (``ResidualScheme.start`` / ``step`` / ``finish``) in a local variable."""
        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        has_pads = torch.tensor(src_tokens.device.type == "xla") or encoder_padding_mask.any()
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings)
        x = x * (1 - encoder_padding_mask.unsqueeze(-1).type_as(x) * has_pads.type_as(x))
        x = x.transpose(0, 1)  # B x T x C -> T x B x C
        scheme = self.scheme
        carry = scheme.start(self, x)
        encoder_states = [x] if return_all_hiddens else []
        fc_results: List[Optional[Tensor]] = []
        layer_padding_mask = encoder_padding_mask if has_pads else None  # one host sync, before the loop
        for layer in self.layers:
            carry, rest = scheme.step(layer, carry, encoder_padding_mask=layer_padding_mask)
            if return_all_hiddens:
                encoder_states.append(scheme.hidden_state(carry))
                fc_results.append(rest[0] if rest else None)
        x = scheme.finish(self, carry)
        src_lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        return {
            "encoder_out": [x],  # T x B x C
            "encoder_padding_mask": [encoder_padding_mask],  # B x T
            "encoder_embedding": [encoder_embedding],  # B x T x C
            "encoder_states": encoder_states,  # List[T x B x C]
            "fc_results": fc_results,  # List[T x B x C]
            "src_tokens": [],
            "src_lengths": [src_lengths],
        }

    def build_encoder_layer(self, cfg):
        layer_cls = get_scheme(cfg.residual_scheme).encoder_layer_cls
        return layer_cls(cfg, return_fc=self.return_fc)  # wrapped by place_layers, with its position known


class ResidualTransformerDecoder(TransformerDecoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(
            cfg,
            dictionary,
            embed_tokens,
            no_encoder_attn=no_encoder_attn,
            output_projection=output_projection,
        )
        place_layers(self, cfg)
        self.scheme = get_scheme(cfg.residual_scheme)
        # the stack's width, as fairseq's own top LayerNorm: the embedding may be wider (--decoder-input-dim)
        self.layer_norm: Optional[nn.Module] = self.scheme.build_stack_output(
            self.layer_norm, cfg.decoder.embed_dim, cfg
        )

    def extract_features_scriptable(
        self,
        prev_output_tokens,
        encoder_out,
        incremental_state=None,
        full_context_alignment=False,
        alignment_layer=None,
        alignment_heads=None,
    ):
        """fairseq's decoder features, whose layer loop hands the scheme's carry from layer to layer
        in a local variable, with the causal mask made once per call (``future_mask``)."""
        if alignment_layer is None:
            alignment_layer = self.num_layers - 1
        enc: Optional[Tensor] = None
        padding_mask: Optional[Tensor] = None
        if encoder_out is not None and len(encoder_out["encoder_out"]) > 0:
            enc = encoder_out["encoder_out"][0]
        if encoder_out is not None and len(encoder_out["encoder_padding_mask"]) > 0:
            padding_mask = encoder_out["encoder_padding_mask"][0]
        positions = None
        if self.embed_positions is not None:
            positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state)
        if incremental_state is not None:  # only the newest position is computed
            prev_output_tokens = prev_output_tokens[:, -1:]
            if positions is not None:
                positions = positions[:, -1:]
        prev_output_tokens = prev_output_tokens.contiguous()
        x = self.embed_scale * self.embed_tokens(prev_output_tokens)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if positions is not None:
            x += positions
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        x = x.transpose(0, 1)  # B x T x C -> T x B x C
        self_attn_padding_mask: Optional[Tensor] = None
        if self.cross_self_attention or prev_output_tokens.eq(self.padding_idx).any():
            self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)
        self_attn_mask = future_mask(x) if incremental_state is None and not full_context_alignment else None
        scheme = self.scheme
        carry = scheme.start(self, x)
        attn: Optional[Tensor] = None
        inner_states: List[Optional[Tensor]] = [x]
        for idx, layer in enumerate(self.layers):
            carry, (layer_attn, _) = scheme.step(
                layer,
                carry,
                encoder_out=enc,
                encoder_padding_mask=padding_mask,
                incremental_state=incremental_state,
                self_attn_mask=self_attn_mask,
                self_attn_padding_mask=self_attn_padding_mask,
                need_attn=bool(idx == alignment_layer),
                need_head_weights=bool(idx == alignment_layer),
            )
            inner_states.append(scheme.hidden_state(carry))
            if layer_attn is not None and idx == alignment_layer:
                attn = layer_attn.float().to(x)
        if attn is not None:
            if alignment_heads is not None:
                attn = attn[:alignment_heads]
            attn = attn.mean(dim=0)  # average over heads
        x = scheme.finish(self, carry)
        x = x.transpose(0, 1)  # T x B x C -> B x T x C
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        return x, {"attn": [attn], "inner_states": inner_states}

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        layer_cls = get_scheme(cfg.residual_scheme).decoder_layer_cls
        return layer_cls(cfg, no_encoder_attn)  # wrapped by place_layers, with its position known


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
    validate_output_options(cfg, scheme)
    scheme.validate(cfg)


def validate_output_options(cfg, scheme) -> None:
    """--residual-output-alpha / --residual-output-scale: finite (the scale positive), and only for a scheme
    whose stack output they shape (ResiDual's y = alpha * x^ln + LN(x^d))."""
    alpha, scale = float(cfg.residual_output_alpha), float(cfg.residual_output_scale)
    if not math.isfinite(alpha):
        raise ConfigError(f"--residual-output-alpha must be a finite number, got {alpha}")
    if not (math.isfinite(scale) and scale > 0):
        raise ConfigError(f"--residual-output-scale must be a positive finite number, got {scale}")
    if not scheme.dual_output and (alpha, scale) != (1.0, 1.0):
        given = "--residual-output-alpha" if alpha != 1.0 else "--residual-output-scale"
        dual = " or ".join(name for name, s in SCHEMES.items() if s.dual_output)
        raise ConfigError(
            f"{given} shapes ResiDual's output y = alpha * x^ln + LN(x^d), which --residual-scheme {scheme.name} "
            f"does not have: drop the option, or use --residual-scheme {dual}"
        )


def validate_dictionaries(cfg, task):
    """fairseq's own check raises a bare ValueError; this one names the option that makes a joined dictionary."""
    if cfg.share_all_embeddings and task.source_dictionary != task.target_dictionary:
        data = getattr(getattr(task, "cfg", None), "data", "the data folder")
        raise ConfigError(
            f"--share-all-embeddings needs one dictionary for both languages, but {data} has separate "
            "source and target dictionaries: binarise it with fairseq-preprocess --joined-dictionary "
            "(the data-prep/ scripts do), or drop --share-all-embeddings"
        )


def _known_scheme(name: str) -> str:
    """``--residual-scheme``'s value, or the one-line error naming the choices."""
    try:
        return get_scheme(name).name
    except UnknownSchemeError as unknown:
        raise OptionError(str(unknown)) from None


def _divisor_hint(dim):
    return ", ".join(str(h) for h in (4, 8, 16) if dim % h == 0) or "1"


@register_model("residual_transformer", dataclass=ResidualTransformerConfig)
class ResidualTransformerModel(TransformerModelBase):
    """fairseq Transformer whose residual wiring is chosen by ``--residual-scheme``."""

    def __init__(self, cfg, encoder, decoder):
        super().__init__(cfg, encoder, decoder)
        self.register_buffer(SCHEME_KEY, _scheme_tag(str(cfg.residual_scheme)))
        self.compile_options = compiled_training.options_of(cfg)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
        """fairseq's forward; in training compiled where ``--torch-compile`` asks (``compiled_training``)."""
        if self.training and self.compile_options["torch_compile"]:
            return compiled_training.training_forward(
                TransformerModelBase.forward,
                self,
                self.compile_options,
                src_tokens,
                src_lengths,
                prev_output_tokens,
                **kwargs,
            )
        return super().forward(src_tokens, src_lengths, prev_output_tokens, **kwargs)

    @classmethod
    def add_args(cls, parser):
        # flat flags from the dataclass; no defaults in the parser so that the
        # --arch presets can fill in what the user did not set
        gen_parser_from_dataclass(parser, ResidualTransformerConfig(), delete_default=True)
        check_scheme_by_converter(parser)

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
        check_scheme_tag(state_dict, self.residual_scheme, "residual_transformer")
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)


def check_scheme_tag(state_dict, expected: str, model_name: str) -> None:
    """A checkpoint's state dict was written by ``model_name`` with the scheme ``expected``, or a one-line error."""
    if SCHEME_KEY not in state_dict:
        raise ArchitectureMismatchError(
            f"this checkpoint was not written by {model_name} (it has no '{SCHEME_KEY}'), "
            f"but this model is {model_name} --residual-scheme {expected}: load it with the "
            f"architecture that trained it, or train a {model_name} model from scratch"
        )
    found = _scheme_from_tag(state_dict[SCHEME_KEY])
    if found != expected:
        raise CheckpointMismatchError(
            f"checkpoint was trained with --residual-scheme {found} but this model "
            f"uses --residual-scheme {expected}; pass --residual-scheme {found} or "
            "start from a checkpoint of the same scheme"
        )


def check_scheme_by_converter(parser) -> None:
    """``--residual-scheme`` checked by its converter: argparse's own check of the choices prints the usage of
    every fairseq option (~180 lines) before its error, while the converter's OptionError is one line."""
    (scheme,) = [action for action in parser._actions if action.dest == "residual_scheme"]
    scheme.choices, scheme.type, scheme.metavar = None, _known_scheme, "{" + ",".join(SCHEMES) + "}"
