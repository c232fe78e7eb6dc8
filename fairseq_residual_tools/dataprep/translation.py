"""What raw text went through before the model saw it: the ``translation`` record of ``summary.json``.

A model only translates raw text that goes through the steps its data-bin's text went through.
The plugin's ``fairseq_residual.hub.load_translator`` reads this record from ``summary.json`` (the
plugin does not import these tools); ``fairseq_interactive_flags`` are the same steps for
``fairseq-interactive``. Paths are relative to the data-prep output folder, except in the flags.
"""

import shlex
from pathlib import Path
from typing import Optional

from .moses import TextSteps


def translation_record(
    out: Path,
    src: str,
    tgt: str,
    steps: TextSteps,
    bpe_codes: Optional[Path] = None,
    sentencepiece_model: Optional[Path] = None,
) -> dict:
    """The record for raw source text processed by ``steps``; exactly one of ``bpe_codes`` / ``sentencepiece_model``."""
    out = Path(out)
    if (bpe_codes is None) == (sentencepiece_model is None):
        raise ValueError("give exactly one of bpe_codes and sentencepiece_model")
    moses = steps.tokenize
    flags = ["--source-lang", src, "--target-lang", tgt]
    if moses:
        # fairseq's moses tokenizer splits dashes unless told not to; tokenizer.perl only with -a
        flags += ["--tokenizer", "moses"] + ([] if steps.aggressive_dash_splits else ["--moses-no-dash-splits"])
    if bpe_codes is not None:
        subword = {"bpe": "subword_nmt", "bpe_codes": str(Path(bpe_codes).relative_to(out))}
        flags += ["--bpe", "subword_nmt", "--bpe-codes", str(Path(bpe_codes).resolve())]
    else:
        subword = {"bpe": "sentencepiece", "sentencepiece_model": str(Path(sentencepiece_model).relative_to(out))}
        flags += ["--bpe", "sentencepiece", "--sentencepiece-model", str(Path(sentencepiece_model).resolve())]
    return {
        "source_lang": src,
        "target_lang": tgt,
        "data_bin": "bin",
        "lowercase": steps.lowercase,
        "normalize_punctuation": steps.normalize_punctuation,
        "remove_non_printing": steps.remove_non_printing,
        "tokenizer": "moses" if moses else None,
        "moses_aggressive_dash_splits": steps.aggressive_dash_splits if moses else None,
        **subword,
        # fairseq-interactive lowercases nothing: with "lowercase", lowercase the input first
        "fairseq_interactive_flags": shlex.join(flags),
    }
