"""WMT'14 English-German, as fairseq's ``examples/translation/prepare-wmt14en2de.sh``.

The steps, the choice of validation set (``--valid``) and the sizes of the real release's
test sets: data-prep/README.md.
"""

from functools import partial
from pathlib import Path
from typing import Tuple

from ..files import write_json, write_lines
from . import pipeline
from .cli import add_common_options, check_languages, extract_archive, recipe_parser, run_main
from .formats import aligned_seg_lines, official_seg_text
from .moses import TextSteps, clean_corpus, process_file, process_lines

LANGS = ("en", "de")
CORPORA = {  # name -> (archive, path prefix inside it)
    "europarl-v7": ("training-parallel-europarl-v7.tgz", "training/europarl-v7.de-en"),
    "commoncrawl": ("training-parallel-commoncrawl.tgz", "commoncrawl.de-en"),
    "news-commentary-v12": ("training-parallel-nc-v12.tgz", "training/news-commentary-v12.de-en"),
    "news-commentary-v9": ("training-parallel-nc-v9.tgz", "training/news-commentary-v9.de-en"),
}
EXTRA_TEST_YEARS = (2010, 2011, 2012, 2013, 2015, 2016)
# de-en sentences per newstest set (newstest2014 is the 3,003-sentence "full" version)
NEWSTEST_SIZES = {2010: 2489, 2011: 3003, 2012: 3003, 2013: 3000, 2014: 3003, 2015: 2169, 2016: 2999}
#: the sacrebleu test set of each newstest year: its files are the ones the recipe reads, its text the references
SACREBLEU_SETS = {
    **{year: f"wmt{year % 100}" for year in EXTRA_TEST_YEARS},
    2014: "wmt14/full",  # the 3,003-sentence set, as fairseq's recipe and B2T's scores use
}


def official_files(year: int, src: str, tgt: str) -> Tuple[str, str]:
    """The names of newstest<year>'s source and reference SGML files for ``src`` -> ``tgt``: those that ``sacrebleu -t
    SACREBLEU_SETS[year] -l src-tgt`` reads, from sacrebleu's own table of its test sets (newstest2010-2013 are
    multi-way: each language's ``-src`` file is the others' reference)."""
    from sacrebleu.dataset import DATASETS

    source, reference = DATASETS[SACREBLEU_SETS[year]].langpairs[f"{src}-{tgt}"][:2]
    return Path(source).name, Path(reference).name


def prepare(args) -> pipeline.Stages:
    check_languages(args, LANGS, "WMT'14 here is English-German")
    stages = pipeline.RecipeStages("wmt14", args, args.out or f"data-bin/wmt14.{args.src}-{args.tgt}")
    orig, tmp, text = stages.orig, stages.tmp, stages.text
    w, quiet = args.workers, args.quiet
    corpora = ["europarl-v7", "commoncrawl", f"news-commentary-{args.news_commentary}"]

    for name in corpora:
        archive, inner = CORPORA[name]
        extract_archive(stages, f"extract.{name}", archive, [f"{inner}.{l}" for l in LANGS], orig / name)

    # the test sets' SGML files: newstest2014 from test-full.tgz, the other years from dev.tgz
    test_sets = {"newstest2014": ("test-full", 2014), **{f"newstest{y}": ("dev", y) for y in EXTRA_TEST_YEARS}}
    split_of = {n: "test" if n == "newstest2014" else n for n in test_sets}  # a test set's name in text/ and bin/

    def sgm_files(folder: str, year: int) -> dict:
        """Language -> the test set's SGML file in its archive: the source and reference that sacrebleu reads."""
        names = official_files(year, args.src, args.tgt)
        return {lang: f"{folder}/{name}" for lang, name in zip((args.src, args.tgt), names)}

    for stage, folder in (("extract.dev", "dev"), ("extract.test", "test-full")):  # dev.tgz and test-full.tgz
        members = [m for f, y in test_sets.values() if f == folder for m in sgm_files(f, y).values()]
        extract_archive(stages, stage, f"{folder}.tgz", members, orig / folder, src=args.src, files=members)

    # training text: normalise, remove non-printing characters, tokenise -a (per corpus and side)
    steps = {
        l: TextSteps(lang=l, normalize_punctuation=True, remove_non_printing=True, aggressive_dash_splits=True)
        for l in LANGS
    }
    for name in corpora:
        for l in LANGS:
            raw, dst = orig / name / f"{CORPORA[name][1]}.{l}", tmp / f"{name}.tok.{l}"
            stages.run(f"tokenize.{name}.{l}", [dst], partial(process_file, steps[l], raw, dst, workers=w, quiet=quiet))

    def concat():
        for name in corpora:
            pipeline.same_length([tmp / f"{name}.tok.{l}" for l in LANGS])
        for l in LANGS:
            pipeline.concatenate([tmp / f"{name}.tok.{l}" for name in corpora], tmp / f"train.tags.tok.{l}")

    stages.run("concatenate", [tmp / f"train.tags.tok.{l}" for l in LANGS], concat, options={"corpora": corpora})

    def tokenize_set(name, folder, year):
        segs = aligned_seg_lines({l: orig / folder / member for l, member in sgm_files(folder, year).items()})
        for l in LANGS:
            write_lines(tmp / f"{name}.{l}", process_lines(TextSteps(lang=l, aggressive_dash_splits=True), segs[l]))

    for name, (folder, year) in test_sets.items():
        outputs = [tmp / f"{name}.{l}" for l in LANGS]
        stages.run(f"test-text.{name}", outputs, partial(tokenize_set, name, folder, year), options={"src": args.src})

    # tokenised text per split, before BPE
    if args.valid == "every-100th":
        tok = {"train": tmp / "train", "valid": tmp / "valid"}
        for l in LANGS:
            train, valid = tmp / f"train.{l}", tmp / f"valid.{l}"
            split_valid = partial(pipeline.split_every, tmp / f"train.tags.tok.{l}", 100, train, valid)
            stages.run(f"split-valid.{l}", [train, valid], split_valid)
    else:
        tok = {"train": tmp / "train.tags.tok", "valid": tmp / "newstest2013"}
    tok.update({split_of[n]: tmp / n for n in test_sets})

    codes = text / "code"
    train_text = [Path(f"{tok['train']}.{l}") for l in LANGS]
    learn = partial(pipeline.learn_joint_bpe, train_text, codes, args.bpe_merges, workers=w)
    stages.run("learn-bpe", [codes], learn, options={"bpe_merges": args.bpe_merges, "valid": args.valid})
    # train (and fairseq's held-out valid) are cleaned after BPE; test sets are kept whole
    cleaned = {"train"} | ({"valid"} if args.valid == "every-100th" else set())
    for split, prefix in tok.items():
        bpe_prefix = tmp / f"bpe.{split}" if split in cleaned else text / split
        for l in LANGS:
            inp, out = Path(f"{prefix}.{l}"), Path(f"{bpe_prefix}.{l}")
            apply = partial(pipeline.apply_bpe, codes, inp, out, workers=w)
            stages.run(f"apply-bpe.{split}.{l}", [out], apply, options={"valid": args.valid})
        if split in cleaned:
            clean = partial(clean_corpus, str(bpe_prefix), "en", "de", str(text / split), 1, 250, 1.5)
            stages.run(f"clean.{split}", [text / f"{split}.{l}" for l in LANGS], clean, options={"valid": args.valid})

    test_prefixes = [str(text / split_of[n]) for n in test_sets]
    stages.binarise(
        {"train": str(text / "train"), "valid": str(text / "valid"), "test": ",".join(test_prefixes)}, valid=args.valid
    )

    split_names = {("test" if k == 0 else f"test{k}"): n for k, n in enumerate(test_sets)}  # fairseq's names
    splits_file = stages.databin / "test_splits.json"
    stages.run("test-splits", [splits_file], partial(write_json, splits_file, split_names))
    for name, (folder, year) in test_sets.items():  # what sacreBLEU scores against: the SGML text as sacrebleu reads it
        for l, member in sgm_files(folder, year).items():
            untouched = stages.test_text_path(name, l)
            convert = partial(official_seg_text, [orig / folder / member], untouched)
            stages.run(f"untouched-test.{name}.{l}", [untouched], convert, options={"src": args.src})
    test_text = []
    for split, name in split_names.items():
        official = f"-t {SACREBLEU_SETS[test_sets[name][1]]} -l {args.src}-{args.tgt}"
        test_text.append(pipeline.TestText(split, name, (args.src, args.tgt), text / split_of[name], official))
    counted = {"train": "train", "valid": "valid", **split_of}  # name in summary.json -> text/ prefix
    stages.summary(
        lambda: {n: pipeline.same_length([text / f"{s}.{l}" for l in LANGS]) for n, s in counted.items()},
        valid=args.valid,
        bpe_merges=args.bpe_merges,
        news_commentary=args.news_commentary,
        test_splits=split_names,
        translation=stages.translation(steps[args.src], "subword_nmt", codes),
        expected_newstest_pairs_real_release={f"newstest{y}": n for y, n in NEWSTEST_SIZES.items()},
        test_text=stages.test_text(test_text, lowercase=False),
    )
    return stages


def build_parser():
    parser = recipe_parser("wmt14", __doc__)
    parser.add_argument("--src", default="en", help="source language (en or de)")
    parser.add_argument("--tgt", default="de", help="target language (de or en)")
    parser.add_argument("--bpe-merges", type=int, default=40000, help="joint BPE merges (fairseq: 40000)")
    parser.add_argument(
        "--valid",
        choices=["newstest2013", "every-100th"],
        default="newstest2013",
        help="validation set: newstest2013, or fairseq's every 100th training pair",
    )
    parser.add_argument(
        "--news-commentary",
        choices=["v12", "v9"],
        default="v12",
        help="News Commentary version (fairseq default v12; v9 = fairseq's --icml17)",
    )
    return add_common_options(parser, "data-bin/wmt14.SRC-TGT", "WMT14_BASE_URL")


main = partial(run_main, prepare, build_parser)

if __name__ == "__main__":
    raise SystemExit(main())
