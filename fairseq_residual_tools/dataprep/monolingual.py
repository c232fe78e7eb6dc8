"""Monolingual text for language modelling: tokenise -> subword -> ``fairseq-preprocess --only-source``.

Input: plain text files for train, valid and (optionally) test, one sentence or paragraph a line (an empty
line ends a document for ``--sample-break-mode complete_doc``). Output: a data-bin for
``fairseq-train --task language_modeling`` and ``fairseq-eval-lm``; data-prep/README.md has the steps.
"""

import re
from functools import partial
from pathlib import Path

from ..errors import DataError
from . import pipeline
from .cli import add_common_options, recipe_parser, run_main
from .moses import TextSteps, process_file

LANG_CODE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def check_text(path: str, split: str) -> Path:
    """``path`` is a non-empty text file, or a one-line error naming the option."""
    text = Path(path)
    if not text.is_file():
        raise DataError(f"missing file {text}: --{split} must name a plain text file, one sentence a line")
    if pipeline.count_lines(text) == 0:
        raise DataError(f"empty corpus: {text} (--{split}) has no lines")
    return text


def prepare(args) -> pipeline.Stages:
    if not LANG_CODE.match(args.lang):
        raise DataError(f"language code {args.lang!r} is not a language code (letters, digits, _)")
    inputs = {"train": args.train, "valid": args.valid}
    if args.test:
        inputs["test"] = args.test
    raw = {split: check_text(path, split) for split, path in inputs.items()}

    stages = pipeline.RecipeStages("monolingual", args, args.out)
    tmp, text, w, quiet = stages.tmp, stages.text, args.workers, args.quiet
    tokenize = args.tokenize or ("moses" if args.subword == "bpe" else "none")
    steps = TextSteps(lang=args.lang, tokenize=tokenize == "moses", lowercase=args.lowercase)
    tok = {split: tmp / f"{split}.tok" for split in raw}
    for split, path in raw.items():
        tokenize_file = partial(process_file, steps, path, tok[split], workers=w, quiet=quiet)
        options = stages.options("lang", "lowercase", tokenize=tokenize)
        stages.run(f"tokenize.{split}", [tok[split]], tokenize_file, options=options, inputs=[path])

    if args.subword == "bpe":
        codes = text / "code"
        learn = partial(pipeline.learn_joint_bpe, [tok["train"]], codes, args.bpe_merges, workers=w)
        stages.run("learn-bpe", [codes], learn, options=stages.options("bpe_merges"))
        encode = partial(pipeline.apply_bpe, codes, workers=w)
        bpe, model = "subword_nmt", codes
    else:
        spm = partial(pipeline.train_sentencepiece, [tok["train"]], text / "spm", args.spm_vocab, workers=w)
        stages.run("spm-train", [text / "spm.model", text / "spm.vocab"], spm, options=stages.options("spm_vocab"))
        encode = partial(pipeline.apply_sentencepiece, text / "spm.model", workers=w, quiet=quiet)
        bpe, model = "sentencepiece", text / "spm.model"
    for split in raw:
        dst = text / split
        stages.run(f"subwords.{split}", [dst], partial(encode, tok[split], dst), options=stages.options("subword"))

    binarise = partial(pipeline.fairseq_preprocess_monolingual, {s: str(text / s) for s in raw}, stages.databin, w)
    stages.run("binarise", [stages.databin / "preprocess.done"], binarise, options={"splits": sorted(raw)})
    stages.summary(
        lambda: {s: pipeline.count_lines(text / s) for s in raw},
        lines=True,
        subword=args.subword,
        tokenize=tokenize,
        inputs=inputs,
        language_model=stages.language_model(steps, bpe, model),
    )
    return stages


def build_parser():
    parser = recipe_parser("monolingual", __doc__)
    parser.add_argument("--train", required=True, help="training text, one sentence a line")
    parser.add_argument("--valid", required=True, help="validation text")
    parser.add_argument("--test", help="test text (optional)")
    parser.add_argument("--lang", default="en", help="language code, for the Moses tokeniser's rules (%(default)s)")
    parser.add_argument("--subword", choices=["bpe", "sentencepiece"], default="bpe")
    parser.add_argument(
        "--tokenize", choices=["moses", "none"], help="default: moses with BPE, none with SentencePiece"
    )
    parser.add_argument("--lowercase", action="store_true")
    parser.add_argument("--bpe-merges", type=int, default=10000)
    parser.add_argument("--spm-vocab", type=int, default=8000)
    return add_common_options(parser, None)


main = partial(run_main, prepare, build_parser)

if __name__ == "__main__":
    raise SystemExit(main())
