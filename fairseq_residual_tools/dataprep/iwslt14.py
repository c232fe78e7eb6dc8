"""IWSLT-14 German-English, as fairseq's ``examples/translation/prepare-iwslt14.sh``.

The steps, and the sizes the real release gives: data-prep/README.md.
"""

from functools import partial
from pathlib import Path

from ..files import write_lines
from . import pipeline
from .cli import add_common_options, check_languages, extract_archive, recipe_parser, run_main
from .formats import aligned_seg_lines, iwslt_train_lines, official_seg_text
from .moses import TextSteps, clean_corpus, process_file, process_lines

ARCHIVE = "de-en.tgz"
LANGS = ("de", "en")
PAIR = "de-en"
SPLITS = ("train", "valid", "test")
TEST_SETS = [f"IWSLT14.{name}" for name in ("TED.dev2010", "TEDX.dev2012", "TED.tst2010", "TED.tst2011", "TED.tst2012")]
EXPECTED_PAIRS = {"train": 160239, "valid": 7283, "test": 6750}
VALID_EVERY = 23
# what the recipe reads from the archive
MEMBERS = [f"{PAIR}/train.tags.{PAIR}.{l}" for l in LANGS]
MEMBERS += [f"{PAIR}/{name}.{PAIR}.{l}.xml" for name in TEST_SETS for l in LANGS]


def prepare(args) -> pipeline.Stages:
    check_languages(args, LANGS, "IWSLT-14 here is German-English")
    stages = pipeline.RecipeStages("iwslt14", args, args.out or f"data-bin/iwslt14.{args.src}-{args.tgt}")
    tmp, text, raw = stages.tmp, stages.text, stages.orig / PAIR
    w, quiet = args.workers, args.quiet

    extract_archive(stages, "extract", ARCHIVE, MEMBERS, raw, strip=f"{PAIR}/")

    def train_text(l, out):
        write_lines(out, iwslt_train_lines(raw / f"train.tags.{PAIR}.{l}"))

    for l in LANGS:
        stripped, tok = tmp / f"train.tags.{PAIR}.raw.{l}", tmp / f"train.tags.{PAIR}.tok.{l}"
        stages.run(f"train-text.{l}", [stripped], partial(train_text, l, stripped))
        tokenize = partial(process_file, TextSteps(lang=l), stripped, tok, workers=w, quiet=quiet)
        stages.run(f"tokenize.{l}", [tok], tokenize)

    tok_prefix, clean_prefix = tmp / f"train.tags.{PAIR}.tok", tmp / f"train.tags.{PAIR}.clean"
    clean = partial(clean_corpus, str(tok_prefix), "de", "en", str(clean_prefix), 1, 175, 1.5)
    stages.run("clean", [Path(f"{clean_prefix}.{l}") for l in LANGS], clean)
    for l in LANGS:
        lower, train, valid = tmp / f"train.tags.{PAIR}.{l}", tmp / f"train.{l}", tmp / f"valid.{l}"
        lowercase, cleaned = TextSteps(lang=l, tokenize=False, lowercase=True), Path(f"{clean_prefix}.{l}")
        stages.run(f"lowercase.{l}", [lower], partial(process_file, lowercase, cleaned, lower, quiet=quiet))
        stages.run(f"split-valid.{l}", [train, valid], partial(pipeline.split_every, lower, VALID_EVERY, train, valid))

    test_steps = {l: TextSteps(lang=l, lowercase=True) for l in LANGS}  # also what raw input to the model needs

    def test_set(l):
        lines = []
        for name in TEST_SETS:
            segs = aligned_seg_lines({x: raw / f"{name}.{PAIR}.{x}.xml" for x in LANGS})
            lines += process_lines(test_steps[l], segs[l])
        write_lines(tmp / f"test.{l}", lines)

    for l in LANGS:
        stages.run(f"test.{l}", [tmp / f"test.{l}"], partial(test_set, l))

    codes = text / "code"
    train_files = [tmp / f"train.{l}" for l in LANGS]
    learn = partial(pipeline.learn_joint_bpe, train_files, codes, args.bpe_merges, workers=w)
    stages.run("learn-bpe", [codes], learn, options={"bpe_merges": args.bpe_merges})
    for split in SPLITS:
        for l in LANGS:
            src, dst = tmp / f"{split}.{l}", text / f"{split}.{l}"
            stages.run(f"apply-bpe.{split}.{l}", [dst], partial(pipeline.apply_bpe, codes, src, dst, workers=w))

    stages.binarise({s: str(text / s) for s in SPLITS})
    for l in LANGS:  # what sacreBLEU scores against: the five sets' text as released, in the order of test.<l>
        untouched = stages.test_text_path("test", l)
        xml = [raw / f"{name}.{PAIR}.{l}.xml" for name in TEST_SETS]
        stages.run(f"untouched-test.{l}", [untouched], partial(official_seg_text, xml, untouched))
    test_text = pipeline.TestText("test", "test", (args.src, args.tgt), text / "test")
    stages.summary(
        lambda: {s: pipeline.same_length([text / f"{s}.{l}" for l in LANGS]) for s in SPLITS},
        expected_pairs_real_release=EXPECTED_PAIRS,
        bpe_merges=args.bpe_merges,
        translation=stages.translation(test_steps[args.src], "subword_nmt", codes),
        test_text=stages.test_text([test_text], lowercase=test_steps[args.tgt].lowercase),
    )
    return stages


def build_parser():
    parser = recipe_parser("iwslt14", __doc__)
    parser.add_argument("--src", default="de", help="source language (de or en)")
    parser.add_argument("--tgt", default="en", help="target language (en or de)")
    parser.add_argument("--bpe-merges", type=int, default=10000, help="joint BPE merges (fairseq: 10000)")
    return add_common_options(parser, "data-bin/iwslt14.SRC-TGT", "IWSLT14_BASE_URL")


main = partial(run_main, prepare, build_parser)

if __name__ == "__main__":
    raise SystemExit(main())
