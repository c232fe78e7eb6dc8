"""Embedded corpus -> Moses tokens -> joint BPE -> fairseq data-bin, with the shared pipeline."""

from dataclasses import dataclass
from pathlib import Path

from ..dataprep import pipeline
from .corpus import write_corpus

SRC, TGT = "src", "tgt"


@dataclass
class DemoData:
    root: Path
    databin: Path
    raw_prefixes: dict  # split -> raw text prefix (for detokenised references)


def prepare_demo_data(work, seed=1, train=6000, valid=300, test=300, bpe_merges=3000, force=False, **vocabulary):
    """``vocabulary``: the lexicon sizes of ``corpus.generate_corpus``."""
    work = Path(work)
    raw = write_corpus(work / "raw", seed=seed, src=SRC, tgt=TGT, train=train, valid=valid, test=test, **vocabulary)
    tok, bpe = work / "tok", work / "bpe"
    tok.mkdir(parents=True, exist_ok=True)
    bpe.mkdir(parents=True, exist_ok=True)
    for split, prefix in raw.items():
        pipeline.check_parallel(prefix, SRC, TGT)
        for lang in (SRC, TGT):
            # the synthetic languages use Latin script and English punctuation
            pipeline.moses_tokenize(Path(f"{prefix}.{lang}"), tok / f"{split}.{lang}", "en", force=force)
    codes = work / "bpe.codes"
    pipeline.learn_joint_bpe([tok / f"train.{SRC}", tok / f"train.{TGT}"], codes, bpe_merges, force=force)
    for split in raw:
        for lang in (SRC, TGT):
            pipeline.apply_bpe(codes, tok / f"{split}.{lang}", bpe / f"{split}.{lang}", force=force)
    databin = pipeline.fairseq_preprocess(
        {split: str(bpe / split) for split in raw}, SRC, TGT, work / "data-bin", force=force
    )
    return DemoData(root=work, databin=databin, raw_prefixes=raw)
