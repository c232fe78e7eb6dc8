"""Any parallel corpus: the same tokenise -> subword -> binarise pipeline.

Input: line-aligned text files ``<prefix>.<src>`` / ``<prefix>.<tgt>`` for train,
valid and (optionally) test.

* ``--subword bpe`` (default): Moses tokenisation, optional lowercasing, clean-corpus
  on train (1 to ``--max-len`` tokens, ratio ``--ratio``; ``--max-len 0`` keeps all),
  joint BPE (subword-nmt) learned on train.
* ``--subword sentencepiece``: a joint SentencePiece model trained on train, applied
  to raw text (add ``--tokenize moses`` to tokenise first).

The output is ``bin/`` (joined dictionary, both directions usable) and ``text/``.
"""

import argparse
import json
import re
from pathlib import Path

from ..errors import DataError
from . import pipeline
from .cli import add_common_options, run_main
from .formats import write_lines
from .iwslt14 import same_length
from .moses import TextSteps, clean_corpus, process_file
from .translation import translation_record

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

    out = Path(args.out)
    tmp, text, databin = out / "tmp", out / "text", out / "bin"
    stages = pipeline.Stages(out / "stages.json", force=args.force)
    w, quiet = args.workers, args.quiet
    tokenize = args.tokenize or ("moses" if args.subword == "bpe" else "none")
    langs = (src, tgt)

    tok = {}
    for split, prefix in prefixes.items():
        for lang in langs:
            raw, dst = Path(f"{prefix}.{lang}"), tmp / f"{split}.tok.{lang}"
            steps = TextSteps(lang=lang, tokenize=tokenize == "moses", lowercase=args.lowercase)
            stages.run(
                f"tokenize.{split}.{lang}",
                [dst],
                lambda s=steps, r=raw, d=dst: process_file(s, r, d, workers=w, quiet=quiet),
                options={"tokenize": tokenize, "lowercase": args.lowercase},
                inputs=[raw],
            )
        tok[split] = tmp / f"{split}.tok"
    if args.max_len > 0:
        stages.run(
            "clean.train",
            [tmp / f"train.clean.{l}" for l in langs],
            lambda: clean_corpus(str(tok["train"]), src, tgt, str(tmp / "train.clean"), 1, args.max_len, args.ratio),
            options={"max_len": args.max_len, "ratio": args.ratio},
        )
        tok["train"] = tmp / "train.clean"

    if args.subword == "bpe":
        codes = text / "code"
        stages.run(
            "learn-bpe",
            [codes],
            lambda: pipeline.learn_joint_bpe(
                [Path(f"{tok['train']}.{l}") for l in langs], codes, args.bpe_merges, force=True, workers=w
            ),
            options={"bpe_merges": args.bpe_merges, "train_text": str(tok["train"])},
        )
        encode = lambda inp, dst: pipeline.apply_bpe(codes, inp, dst, force=True, workers=w)  # noqa: E731
    else:
        stages.run(
            "spm-sample",
            [tmp / "spm.input.txt"],
            lambda: pipeline.concatenate([Path(f"{tok['train']}.{l}") for l in langs], tmp / "spm.input.txt"),
            options={"train_text": str(tok["train"])},
        )
        stages.run(
            "spm-train",
            [text / "spm.model", text / "spm.vocab"],
            lambda: pipeline.train_sentencepiece(
                tmp / "spm.input.txt", text / "spm", args.spm_vocab, workers=w, force=True
            ),
            options={"spm_vocab": args.spm_vocab},
        )
        encode = lambda inp, dst: pipeline.apply_sentencepiece(  # noqa: E731
            text / "spm.model", inp, dst, force=True, workers=w, quiet=quiet
        )
    for split in prefixes:
        for lang in langs:
            dst = text / f"{split}.{lang}"
            stages.run(
                f"subwords.{split}.{lang}",
                [dst],
                lambda s=split, l=lang, d=dst: encode(Path(f"{tok[s]}.{l}"), d),
                options={"subword": args.subword, "text": str(tok[split])},
            )

    for split in prefixes:
        if same_length([text / f"{split}.{l}" for l in langs]) == 0:
            raise DataError(f"no {split} pairs left after cleaning {prefixes[split]}.{{{src},{tgt}}}")
    stages.run(
        "binarise",
        [databin / "preprocess.done"],
        lambda: pipeline.fairseq_preprocess(
            {s: str(text / s) for s in prefixes}, src, tgt, databin, joined=True, workers=w, force=True
        ),
        options={"src": src, "tgt": tgt, "splits": sorted(prefixes)},
    )

    def summary():
        pairs = {s: same_length([text / f"{s}.{l}" for l in langs]) for s in prefixes}
        info = {
            "recipe": "custom",
            "pairs": pairs,
            "subword": args.subword,
            "tokenize": tokenize,
            "inputs": prefixes,
            "data_bin": str(databin),
            "translation": translation_record(
                out,
                src,
                tgt,
                moses=tokenize == "moses",
                lowercase=args.lowercase,
                bpe_codes=text / "code" if args.subword == "bpe" else None,
                sentencepiece_model=text / "spm.model" if args.subword == "sentencepiece" else None,
            ),
            "options": vars(args),
        }
        write_lines(out / "summary.json", [json.dumps(info, indent=1)])

    stages.run("summary", [out / "summary.json"], summary, options=vars(args))
    return stages


def build_parser():
    parser = argparse.ArgumentParser(
        prog="prepare-custom.sh",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    add_common_options(parser, default_out="", required=True)
    return parser


def main(argv=None) -> int:
    return run_main(prepare, build_parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
