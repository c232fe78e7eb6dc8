"""Embedded corpus -> Moses tokens -> joint BPE -> fairseq data-bin, as the shared pipeline's stages."""

from collections import namedtuple
from functools import partial
from pathlib import Path

from ..dataprep import pipeline
from ..dataprep.moses import TextSteps, process_file
from .corpus import write_corpus

SRC, TGT = "src", "tgt"
DemoData = namedtuple("DemoData", ["root", "databin", "raw_prefixes"])  # raw_prefixes: split -> raw text prefix


def prepare_demo_data(work, seed=1, train=6000, valid=300, test=300, bpe_merges=3000, **vocabulary):
    """``vocabulary``: the lexicon sizes of ``corpus.generate_corpus``. A stage done with the same arguments
    (``work/stages.json``) is reused."""
    work = Path(work)
    raw = write_corpus(work / "raw", seed=seed, src=SRC, tgt=TGT, train=train, valid=valid, test=test, **vocabulary)
    settings = dict(seed=seed, train=train, valid=valid, test=test, bpe_merges=bpe_merges, **vocabulary)
    stages = pipeline.Stages(work / "stages.json")
    tok, bpe, codes, databin = work / "tok", work / "bpe", work / "bpe.codes", work / "data-bin"
    for split, prefix in raw.items():
        pipeline.check_parallel(prefix, SRC, TGT)
        for lang in (SRC, TGT):
            # the synthetic languages use Latin script and English punctuation
            out = tok / f"{split}.{lang}"
            tokenize = partial(process_file, TextSteps(lang="en"), Path(f"{prefix}.{lang}"), out, quiet=True)
            stages.run(f"tokenize.{split}.{lang}", [out], tokenize, settings)
    learn = partial(pipeline.learn_joint_bpe, [tok / f"train.{SRC}", tok / f"train.{TGT}"], codes, bpe_merges)
    stages.run("learn-bpe", [codes], learn, settings)
    for split in raw:
        for lang in (SRC, TGT):
            apply = partial(pipeline.apply_bpe, codes, tok / f"{split}.{lang}", bpe / f"{split}.{lang}")
            stages.run(f"apply-bpe.{split}.{lang}", [bpe / f"{split}.{lang}"], apply, settings)
    binarise = partial(pipeline.fairseq_preprocess, {split: str(bpe / split) for split in raw}, SRC, TGT, databin)
    stages.run("binarise", [databin / "preprocess.done"], binarise, settings)
    return DemoData(work, databin, raw)
