"""What is compared: model sizes, and the variants built at each size."""

from argparse import Namespace
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

#: the variant every ratio is taken against
REFERENCE = "stock-pre"


@dataclass(frozen=True)
class Size:
    """One model size and the batches it is measured on."""

    name: str
    #: a residual_transformer preset (``--arch``) giving widths, heads and dropout
    arch: str
    layers: int
    vocab: int
    #: training batch: sentences x fixed source / target length
    batch: int
    src_len: int
    tgt_len: int
    #: generation batch (sentences) and the exact number of tokens generated per hypothesis
    gen_batch: int
    gen_len: int
    #: the residual_transformer schemes measured (beside stock Post-LN and Pre-LN); None: all registered
    schemes: Optional[Sequence[str]] = None
    #: (embed_dim, ffn_dim, heads) instead of the preset's, for the test suite's tiny size
    width: Optional[Sequence[int]] = None


_DEFAULT_SCHEMES = ("post", "pre", "residual")
SIZES = {
    s.name: s
    for s in (
        Size("iwslt-e6d6", "residual_transformer_iwslt_de_en", 6, 10000, 64, 32, 32, 16, 24, _DEFAULT_SCHEMES),
        Size("wmt-e6d6", "residual_transformer_wmt_en_de", 6, 32000, 32, 32, 32, 8, 24, _DEFAULT_SCHEMES),
        # 150M parameters: with Adam, 2.3 GB per variant held at once, so ResiDual only
        Size("wmt-e18d18", "residual_transformer_wmt_en_de", 18, 32000, 16, 32, 32, 4, 24, ("residual",)),
    )
}
#: a size small enough for the test suite
TINY = Size("tiny", "residual_transformer_iwslt_de_en", 2, 60, 4, 7, 6, 2, 5, width=(16, 32, 2))
#: the Bible study's model (results/bible-study: E6D6, width 64, FFN 256, 4 heads, its 7,840-word dictionary) at its
#: 4,096 tokens per batch, as 128 sentences of 32
CPU_STUDY = Size("cpu-study", "residual_transformer_iwslt_de_en", 6, 7836, 128, 32, 32, 8, 24, width=(64, 256, 4))


#: the variant of Block Attention Residuals
ATTN_RES_BLOCK = "attn-res-block"


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    #: residual_transformer's --residual-scheme, or None for fairseq's stock transformer
    scheme: Optional[str] = None
    #: stock transformer only: Pre-LN (True) or Post-LN (False)
    normalize_before: bool = False
    #: hc and mhc only: --hc-streams (None: its default)
    streams: Optional[int] = None
    #: attn-res only: Block Attention Residuals with blocks of this many layers (--attn-res-blocks: the depth over
    #: it); None: Full
    block_layers: Optional[int] = None


def variants(schemes: Optional[Sequence[str]] = None) -> List[Variant]:
    """Stock Post-LN and Pre-LN, then ``schemes`` (default: every registered one) in SCHEMES order, attn-res
    followed by its Block variant (``ATTN_RES_BLOCK``)."""
    from fairseq_residual.schemes import SCHEMES

    stock = [
        Variant("stock-post", "fairseq transformer, Post-LN", None, False),
        Variant("stock-pre", "fairseq transformer, Pre-LN (--encoder/decoder-normalize-before)", None, True),
    ]
    names = [n for n in SCHEMES if schemes is None or n in schemes]
    chosen = []
    for n in names:
        chosen.append(Variant(n, f"residual_transformer --residual-scheme {n}", n))
        if n == "attn-res":  # and its Block variant, one block per layer (a block count dividing every depth)
            label = "residual_transformer --residual-scheme attn-res --attn-res-blocks (the depth: one block per layer)"
            chosen.append(Variant(ATTN_RES_BLOCK, label, "attn-res", block_layers=1))
    return stock + chosen


def model_args(size: Size) -> Dict:
    """The preset's widths, heads and dropout, with the size's depth, as flat options."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    import fairseq_residual  # noqa: F401  (registers the presets)

    preset = Namespace()
    ARCH_CONFIG_REGISTRY[size.arch](preset)
    args = {k: v for k, v in vars(preset).items() if v is not None}
    if size.width is not None:
        embed, ffn, heads = size.width
        for side in ("encoder", "decoder"):
            args.update({f"{side}_embed_dim": embed, f"{side}_ffn_embed_dim": ffn, f"{side}_attention_heads": heads})
    args.update(
        encoder_layers=size.layers,
        decoder_layers=size.layers,
        share_all_embeddings=True,
        max_source_positions=max(size.src_len, size.gen_len) + 8,
        max_target_positions=max(size.tgt_len, size.gen_len) + 8,
    )
    return args


def build_variant(variant: Variant, size: Size, task, device: str = "cpu"):
    """The variant's model at ``size`` for ``task``'s dictionaries, initialised from seed 0 on the CPU
    (the same weights on every device) and moved to ``device``."""
    import torch
    from fairseq.models import ARCH_MODEL_REGISTRY

    options: Dict[str, object]
    if variant.scheme is None:
        before = variant.normalize_before
        arch, options = "transformer", dict(encoder_normalize_before=before, decoder_normalize_before=before)
    else:
        arch, options = "residual_transformer", dict(residual_scheme=variant.scheme)
        if variant.streams is not None:
            options["hc_streams"] = variant.streams
        if variant.block_layers is not None:
            options["attn_res_blocks"] = size.layers // variant.block_layers
    args = Namespace(**dict(model_args(size), arch=arch, **options))  # the variant's options override the preset's
    torch.manual_seed(0)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, task).to(device)
