"""Any parallel corpus: the same tokenise -> subword -> binarise pipeline.

Input: line-aligned ``<prefix>.<src>`` / ``<prefix>.<tgt>`` files for train, valid and (optionally) test;
the steps of ``--subword bpe`` and ``--subword sentencepiece``: data-prep/README.md.
"""

import re
from functools import partial
from pathlib import Path

from ..errors import DataError
from . import pipeline
from .cli import add_common_options, recipe_parser, run_main
from .moses import TextSteps, clean_corpus, process_file

LANG_CODE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def prepare(args) -> pipeline.Stages:
    src, tgt = args.src, args.tgt
    for lang in (src, tgt):
        if not LANG_CODE.match(lang):
            raise DataError(f"language code {lang!r} is not usable in file names (letters, digits, _)")
    if src == tgt:
        raise DataError(f"--src and --tgt are both {src!r}: a translation corpus needs two languages")
    prefixes = {"train": args.train_prefix, "valid": args.valid_prefix}
    if args.test_prefix:
        prefixes["test"] = args.test_prefix
    for prefix in prefixes.values():
        pipeline.check_parallel(prefix, src, tgt)

    stages = pipeline.RecipeStages("custom", args, args.out)
    tmp, text = stages.tmp, stages.text
    w, quiet = args.workers, args.quiet
    tokenize = args.tokenize or ("moses" if args.subword == "bpe" else "none")
    langs = (src, tgt)

    steps = {l: TextSteps(lang=l, tokenize=tokenize == "moses", lowercase=args.lowercase) for l in langs}
    tok = {}
    for split, prefix in prefixes.items():
        for lang in langs:
            raw, dst = Path(f"{prefix}.{lang}"), tmp / f"{split}.tok.{lang}"
            tokenize_file = partial(process_file, steps[lang], raw, dst, workers=w, quiet=quiet)
            options = stages.options("lowercase", tokenize=tokenize)
            stages.run(f"tokenize.{split}.{lang}", [dst], tokenize_file, options=options, inputs=[raw])
        tok[split] = tmp / f"{split}.tok"
    if args.max_len > 0:
        cleaned = tmp / "train.clean"
        clean = partial(clean_corpus, str(tok["train"]), src, tgt, str(cleaned), 1, args.max_len, args.ratio)
        stages.run(
            "clean.train", [Path(f"{cleaned}.{l}") for l in langs], clean, options=stages.options("max_len", "ratio")
        )
        tok["train"] = cleaned

    train_text = [Path(f"{tok['train']}.{l}") for l in langs]
    if args.subword == "bpe":
        codes = text / "code"
        learn = partial(pipeline.learn_joint_bpe, train_text, codes, args.bpe_merges, workers=w)
        stages.run("learn-bpe", [codes], learn, options=stages.options("bpe_merges", train_text=str(tok["train"])))
        encode = partial(pipeline.apply_bpe, codes, workers=w)
        bpe, model = "subword_nmt", codes
    else:
        spm = partial(pipeline.train_sentencepiece, train_text, text / "spm", args.spm_vocab, workers=w)
        spm_options = stages.options("spm_vocab", train_text=str(tok["train"]))
        stages.run("spm-train", [text / "spm.model", text / "spm.vocab"], spm, options=spm_options)
        encode = partial(pipeline.apply_sentencepiece, text / "spm.model", workers=w, quiet=quiet)
        bpe, model = "sentencepiece", text / "spm.model"
    for split in prefixes:
        for lang in langs:
            inp, dst = Path(f"{tok[split]}.{lang}"), text / f"{split}.{lang}"
            options = stages.options("subword", text=str(tok[split]))
            stages.run(f"subwords.{split}.{lang}", [dst], partial(encode, inp, dst), options=options)

    for split in prefixes:
        if pipeline.same_length([text / f"{split}.{l}" for l in langs]) == 0:
            raise DataError(f"no {split} pairs left after cleaning {prefixes[split]}.{{{src},{tgt}}}")
    stages.binarise({s: str(text / s) for s in prefixes}, splits=sorted(prefixes))
    test_text = []  # what sacreBLEU scores against: the test files as given
    if args.test_prefix:
        for lang in langs:
            raw, untouched = Path(f"{args.test_prefix}.{lang}"), stages.test_text_path("test", lang)
            copy = partial(pipeline.concatenate, [raw], untouched)
            stages.run(f"untouched-test.{lang}", [untouched], copy, inputs=[raw])
        test_text.append(pipeline.TestText("test", "test", langs, text / "test"))
    stages.summary(
        lambda: {s: pipeline.same_length([text / f"{s}.{l}" for l in langs]) for s in prefixes},
        subword=args.subword,
        tokenize=tokenize,
        inputs=prefixes,
        translation=stages.translation(steps[src], bpe, model),
        test_text=stages.test_text(test_text, lowercase=args.lowercase),
    )
    return stages


def build_parser():
    parser = recipe_parser("custom", __doc__)
    parser.add_argument("--train-prefix", required=True, help="training text PREFIX.{src,tgt}")
    parser.add_argument("--valid-prefix", required=True, help="validation text PREFIX.{src,tgt}")
    parser.add_argument("--test-prefix", help="test text PREFIX.{src,tgt} (optional)")
    parser.add_argument("--src", required=True, help="source language code (file suffix)")
    parser.add_argument("--tgt", required=True, help="target language code (file suffix)")
    parser.add_argument("--subword", choices=["bpe", "sentencepiece"], default="bpe")
    parser.add_argument(
        "--tokenize", choices=["moses", "none"], help="default: moses with BPE, none with SentencePiece"
    )
    parser.add_argument("--lowercase", action="store_true")
    parser.add_argument("--bpe-merges", type=int, default=10000)
    parser.add_argument("--spm-vocab", type=int, default=8000)
    parser.add_argument("--max-len", type=int, default=250, help="clean train to 1..N tokens (0: no cleaning)")
    parser.add_argument("--ratio", type=float, default=1.5, help="clean train: maximum length ratio")
    return add_common_options(parser, None)


main = partial(run_main, prepare, build_parser)

if __name__ == "__main__":
    raise SystemExit(main())
