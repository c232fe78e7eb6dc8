"""WMT'14 English-German, as fairseq's ``examples/translation/prepare-wmt14en2de.sh``.

1. Training corpora: Europarl v7 (``training-parallel-europarl-v7.tgz``),
   Common Crawl (``training-parallel-commoncrawl.tgz``) and News Commentary v12
   (``training-parallel-nc-v12.tgz``, fairseq's default; ``--news-commentary v9``
   gives the ICML'17 ConvS2S variant, fairseq's ``--icml17``).
2. Each side: ``normalize-punctuation.perl -l`` -> ``remove-non-printing-char.perl``
   -> ``tokenizer.perl -a -l`` (aggressive hyphen splitting).
3. Test sets: the ``<seg>`` lines of the SGML files (``’`` -> ``'``), tokenised
   with ``-a``: newstest2014 from ``test-full.tgz`` is ``test``; newstest2010-2016
   from WMT17's ``dev.tgz`` are extra test splits (the paper's WMT figures average
   several test sets, Takase et al.'s protocol).
4. Validation: newstest2013 (``--valid newstest2013``, the default, as the issue
   and most WMT'14 papers do). fairseq's script instead holds out every 100th
   training line (``--valid every-100th``) and never reads newstest2013.
5. Joint BPE, 40,000 merges learned on the training text, applied everywhere;
   ``clean-corpus-n`` on the BPE'd training pairs (1-250 tokens, ratio 1.5; also
   on valid with ``every-100th``, as fairseq does).
6. ``fairseq-preprocess --joined-dictionary``; test splits are ``test`` (newstest2014),
   ``test1`` ... (see ``bin/test_splits.json``).
"""

import argparse
import json
from pathlib import Path

from ..errors import DataError
from . import pipeline
from .cli import ArchiveSource, add_common_options, add_download_options, run_main
from .formats import seg_lines, write_lines
from .iwslt14 import same_length, split_every
from .moses import TextSteps, clean_corpus, process_file, process_lines
from .translation import translation_record

LANGS = ("en", "de")
CORPORA = {  # name -> (archive, path prefix inside it)
    "europarl-v7": ("training-parallel-europarl-v7.tgz", "training/europarl-v7.de-en"),
    "commoncrawl": ("training-parallel-commoncrawl.tgz", "commoncrawl.de-en"),
    "news-commentary-v12": ("training-parallel-nc-v12.tgz", "training/news-commentary-v12.de-en"),
    "news-commentary-v9": ("training-parallel-nc-v9.tgz", "training/news-commentary-v9.de-en"),
}
DEV_ARCHIVE, TEST_ARCHIVE = "dev.tgz", "test-full.tgz"
EXTRA_TEST_YEARS = (2010, 2011, 2012, 2013, 2015, 2016)
# de-en sentences per newstest set (newstest2014 is the 3,003-sentence "full" version)
NEWSTEST_SIZES = {2010: 2489, 2011: 3003, 2012: 3003, 2013: 3000, 2014: 3003, 2015: 2169, 2016: 2999}


def sgm_candidates(prefix: str, year: int, lang: str, role: str):
    """The file names WMT used for newstest<year> in language ``lang`` (``role`` src or ref first)."""
    other = "ref" if role == "src" else "src"
    names = []
    for r in (role, other):
        names += [f"{prefix}newstest{year}-{d}-{r}.{lang}.sgm" for d in ("deen", "ende")]
        names.append(f"{prefix}newstest{year}-{r}.{lang}.sgm")
    return names


def find_sgm(names_in_archive, prefix, year, lang, role):
    for name in sgm_candidates(prefix, year, lang, role):
        if name in names_in_archive:
            return name
    raise DataError(
        f"no SGML file for newstest{year} ({lang}) under {prefix}: tried "
        + ", ".join(sgm_candidates(prefix, year, lang, role))
    )


def prepare(args) -> pipeline.Stages:
    if {args.src, args.tgt} != set(LANGS):
        raise DataError(
            f"WMT'14 here is English-German: use --src en --tgt de or --src de --tgt en "
            f"(got --src {args.src} --tgt {args.tgt})"
        )
    out = Path(args.out or f"data-bin/wmt14.{args.src}-{args.tgt}")
    orig, tmp, text, databin = out / "orig", out / "tmp", out / "text", out / "bin"
    source = ArchiveSource(args, out)
    stages = pipeline.Stages(out / "stages.json", force=args.force)
    w, quiet = args.workers, args.quiet
    corpora = ["europarl-v7", "commoncrawl", f"news-commentary-{args.news_commentary}"]

    for name in corpora:
        archive, inner = CORPORA[name]
        dest = orig / name
        stages.run(
            f"extract.{name}",
            [dest],
            lambda a=archive, i=inner, d=dest: source.extract(a, [f"{i}.{l}" for l in ("de", "en")], d),
            options=source.identity(archive),
        )

    def extract_sgm(archive, prefix, years, dest):
        import tarfile

        path = source.fetch(archive)
        with tarfile.open(path) as tar:
            names = set(tar.getnames())
        members = [find_sgm(names, prefix, y, l, "src" if l == args.src else "ref") for y in years for l in LANGS]
        source.extract(archive, members, dest)

    stages.run(
        "extract.dev",
        [orig / "dev"],
        lambda: extract_sgm(DEV_ARCHIVE, "dev/", EXTRA_TEST_YEARS, orig / "dev"),
        options={**source.identity(DEV_ARCHIVE), "src": args.src},
    )
    stages.run(
        "extract.test",
        [orig / "test-full"],
        lambda: extract_sgm(TEST_ARCHIVE, "test-full/", (2014,), orig / "test-full"),
        options={**source.identity(TEST_ARCHIVE), "src": args.src},
    )

    # training text: normalise, remove non-printing characters, tokenise -a (per corpus and side)
    steps = {
        l: TextSteps(lang=l, normalize_punctuation=True, remove_non_printing=True, aggressive_dash_splits=True)
        for l in LANGS
    }
    for name in corpora:
        inner = CORPORA[name][1]
        for l in LANGS:
            raw = orig / name / f"{inner}.{l}"
            tok = tmp / f"{name}.tok.{l}"
            stages.run(
                f"tokenize.{name}.{l}",
                [tok],
                lambda r=raw, t=tok, l=l: process_file(steps[l], r, t, workers=w, quiet=quiet),
            )

    def concat():
        for name in corpora:
            same_length([tmp / f"{name}.tok.{l}" for l in LANGS])
        for l in LANGS:
            pipeline.concatenate([tmp / f"{name}.tok.{l}" for name in corpora], tmp / f"train.tags.tok.{l}")

    stages.run("concatenate", [tmp / f"train.tags.tok.{l}" for l in LANGS], concat, options={"corpora": corpora})

    def sgm_path(folder, prefix, year, l):
        names = {str(p.relative_to(orig / folder)) for p in (orig / folder).rglob("*.sgm")}
        return orig / folder / find_sgm(names, prefix, year, l, "src" if l == args.src else "ref")

    test_sets = {"newstest2014": ("test-full", "test-full/", 2014)}
    test_sets.update({f"newstest{y}": ("dev", "dev/", y) for y in EXTRA_TEST_YEARS})
    for name, (folder, prefix, year) in test_sets.items():

        def tokenize_set(folder=folder, prefix=prefix, year=year, name=name):
            paths = {l: sgm_path(folder, prefix, year, l) for l in LANGS}
            lines = {
                l: process_lines(TextSteps(lang=l, aggressive_dash_splits=True), seg_lines(paths[l])) for l in LANGS
            }
            if len(lines["en"]) != len(lines["de"]):
                raise DataError(
                    f"{paths['en']} and {paths['de']} have {len(lines['en'])} and "
                    f"{len(lines['de'])} segments; they must be aligned"
                )
            for l in LANGS:
                write_lines(tmp / f"{name}.{l}", lines[l])

        stages.run(f"test-text.{name}", [tmp / f"{name}.{l}" for l in LANGS], tokenize_set, options={"src": args.src})

    # tokenised text per split, before BPE
    if args.valid == "every-100th":
        tok = {"train": tmp / "train", "valid": tmp / "valid"}
        for l in LANGS:
            stages.run(
                f"split-valid.{l}",
                [tmp / f"train.{l}", tmp / f"valid.{l}"],
                lambda l=l: split_every(tmp / f"train.tags.tok.{l}", 100, tmp / f"train.{l}", tmp / f"valid.{l}"),
            )
    else:
        tok = {"train": tmp / "train.tags.tok", "valid": tmp / "newstest2013"}
    test_names = ["newstest2014"] + [f"newstest{y}" for y in EXTRA_TEST_YEARS]
    tok.update({("test" if n == "newstest2014" else n): tmp / n for n in test_names})

    codes = text / "code"
    stages.run(
        "learn-bpe",
        [codes],
        lambda: pipeline.learn_joint_bpe(
            [Path(f"{tok['train']}.{l}") for l in LANGS], codes, args.bpe_merges, force=True, workers=w
        ),
        options={"bpe_merges": args.bpe_merges, "valid": args.valid},
    )
    # train (and fairseq's held-out valid) are cleaned after BPE; test sets are kept whole
    cleaned = {"train"} | ({"valid"} if args.valid == "every-100th" else set())
    for split, prefix in tok.items():
        bpe_prefix = tmp / f"bpe.{split}" if split in cleaned else text / split
        for l in LANGS:
            stages.run(
                f"apply-bpe.{split}.{l}",
                [Path(f"{bpe_prefix}.{l}")],
                lambda p=prefix, b=bpe_prefix, l=l: pipeline.apply_bpe(
                    codes, Path(f"{p}.{l}"), Path(f"{b}.{l}"), force=True, workers=w
                ),
                options={"valid": args.valid},
            )
        if split in cleaned:
            stages.run(
                f"clean.{split}",
                [text / f"{split}.{l}" for l in LANGS],
                lambda b=bpe_prefix, s=split: clean_corpus(str(b), "en", "de", str(text / s), 1, 250, 1.5),
                options={"valid": args.valid},
            )

    test_prefixes = [str(text / "test")] + [str(text / f"newstest{y}") for y in EXTRA_TEST_YEARS]
    stages.run(
        "binarise",
        [databin / "preprocess.done"],
        lambda: pipeline.fairseq_preprocess(
            {"train": str(text / "train"), "valid": str(text / "valid"), "test": ",".join(test_prefixes)},
            args.src,
            args.tgt,
            databin,
            joined=True,
            workers=w,
            force=True,
        ),
        options={"src": args.src, "tgt": args.tgt, "valid": args.valid},
    )

    split_names = {("test" if k == 0 else f"test{k}"): n for k, n in enumerate(test_names)}

    def summary():
        write_lines(databin / "test_splits.json", [json.dumps(split_names, indent=1)])
        pairs = {s: same_length([text / f"{s}.{l}" for l in LANGS]) for s in ("train", "valid")}
        pairs.update(
            {n: same_length([text / f"{'test' if n == 'newstest2014' else n}.{l}" for l in LANGS]) for n in test_names}
        )
        info = {
            "recipe": "wmt14",
            "pairs": pairs,
            "valid": args.valid,
            "bpe_merges": args.bpe_merges,
            "news_commentary": args.news_commentary,
            "test_splits": split_names,
            "translation": translation_record(
                out,
                args.src,
                args.tgt,
                moses=True,
                aggressive_dash_splits=True,
                normalize_punctuation=True,
                remove_non_printing=True,
                bpe_codes=codes,
            ),
            "expected_newstest_pairs_real_release": {f"newstest{y}": n for y, n in NEWSTEST_SIZES.items()},
            "data_bin": str(databin),
            "options": vars(args),
        }
        write_lines(out / "summary.json", [json.dumps(info, indent=1)])

    stages.run("summary", [out / "summary.json", databin / "test_splits.json"], summary, options=vars(args))
    return stages


def build_parser():
    parser = argparse.ArgumentParser(
        prog="prepare-wmt14.sh",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    add_common_options(parser, default_out="data-bin/wmt14.SRC-TGT")
    add_download_options(parser, "WMT14_BASE_URL")
    return parser


def main(argv=None) -> int:
    return run_main(prepare, build_parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
