"""OPUS-100 v1.0 (English-centric, 99 pairs with English), for fairseq's ``translation_multi_simple_epoch`` task.

The steps, and the release's sizes and gaps: data-prep/README.md.
"""

import json
import math
import random
import re
from functools import partial
from pathlib import Path

from ..errors import DataError
from ..files import atomic_outputs, write_json
from . import pipeline
from .cli import add_common_options, extract_archive, recipe_parser, run_main
from .download import Checksums
from .formats import utf8_lines

SPLITS = {"train": "train", "dev": "valid", "test": "test"}  # release name -> fairseq name
RELEASE_FOLDER = "opus-100-corpus/v1.0/supervised"  # in each archive, holding <pair>/opus.<pair>-<split>.<lang>
PAIR_ARCHIVE = re.compile(r"opus-100-corpus-([^-]+)-([^-]+)-v1\.0\.tar\.gz")  # not the zeroshot archive


def pair_of(lang: str) -> str:
    return "-".join(sorted([lang, "en"]))


def pair_files(pair: str, names) -> list:
    """The files of ``pair`` among an archive's ``names``: both sides of train (required: one missing is
    reported) and of dev and test where present (five pairs have none)."""
    wanted = [f"{RELEASE_FOLDER}/{pair}/opus.{pair}-{s}.{l}" for s in SPLITS for l in pair.split("-")]
    return [m for m in wanted if m in names or "-train." in m]


def parse_langs(value: str, checksums: Checksums):
    """``--langs``: the non-English sides of the chosen pairs, among the pair archives in ``checksums``."""
    found = [PAIR_ARCHIVE.fullmatch(name) for name in checksums.data.get("archives", {})]
    known = sorted(m[2] if m[1] == "en" else m[1] for m in found if m)
    if value == "all":
        return known
    langs = sorted({x.strip() for x in value.split(",") if x.strip()})
    if not langs:
        raise DataError("--langs is empty: give codes such as de,fr,zh or 'all'")
    unknown = [l for l in langs if l not in known]
    if "en" in langs:
        raise DataError("--langs lists the non-English side of each pair; English is always included")
    if unknown:
        raise DataError(
            f"no OPUS-100 pair with English for {', '.join(unknown)} in {checksums.path} (known: {', '.join(known)})"
        )
    return langs


def sample_for_spm(pairs, orig: Path, out: Path, total: int, temperature: float, seed: int):
    """Training lines of both sides, each pair's share proportional to n^(1/T)."""
    counts = {p: pipeline.count_lines(orig / p / f"opus.{p}-train.en") for p in pairs}
    weights = {p: n ** (1.0 / temperature) for p, n in counts.items()}
    total = min(total, sum(counts.values()))
    rng = random.Random(seed)
    with atomic_outputs([out]) as (tmp,), open(tmp, "w", encoding="utf-8") as g:
        for p in pairs:
            quota = min(counts[p], max(1, math.floor(total * weights[p] / sum(weights.values()))))
            chosen = set(rng.sample(range(counts[p]), quota))
            for lang in p.split("-"):
                lines = utf8_lines(orig / p / f"opus.{p}-train.{lang}")
                g.writelines(line for i, line in enumerate(lines) if i in chosen)


def prepare(args) -> pipeline.Stages:
    stages = pipeline.RecipeStages("opus100", args, args.out or "data-bin/opus100")
    orig, tmp, text, databin = stages.orig, stages.tmp, stages.text, stages.databin
    langs = parse_langs(args.langs, Checksums(args.checksums))
    pairs = [pair_of(l) for l in langs]
    w, quiet = args.workers, args.quiet

    for pair in pairs:
        archive, members = f"opus-100-corpus-{pair}-v1.0.tar.gz", partial(pair_files, pair)
        extract_archive(stages, f"extract.{pair}", archive, members, orig / pair, strip=f"{RELEASE_FOLDER}/{pair}/")

    def release_text(pair):
        """fairseq split -> the release's text prefix, for the splits ``pair`` has (five pairs have only train)."""
        prefixes = {fairseq: orig / pair / f"opus.{pair}-{split}" for split, fairseq in SPLITS.items()}
        return {split: prefix for split, prefix in prefixes.items() if Path(f"{prefix}.en").exists()}

    def check():
        found = {}
        for pair in pairs:
            found[pair] = {s: pipeline.check_parallel(p, *pair.split("-")) for s, p in release_text(pair).items()}
        write_json(tmp / "raw_pairs.json", found)

    stages.run("check", [tmp / "raw_pairs.json"], check, options={"pairs": pairs})

    sample = tmp / "spm.sample.txt"
    draw = partial(sample_for_spm, pairs, orig, sample, args.spm_sample_lines, args.temperature, args.seed)
    stages.run(
        "spm-sample", [sample], draw, options=stages.options("spm_sample_lines", "temperature", "seed", pairs=pairs)
    )
    spm_args = (args.spm_vocab, args.spm_model_type, args.spm_character_coverage)
    spm = partial(pipeline.train_sentencepiece, [sample], text / "spm", *spm_args, workers=w)
    spm_options = stages.options("spm_vocab", "spm_model_type", "spm_character_coverage")
    stages.run("spm-train", [text / "spm.model", text / "spm.vocab"], spm, options=spm_options)
    dictionary = text / "dict.txt"
    stages.run("dictionary", [dictionary], partial(pipeline.sentencepiece_dictionary, text / "spm.vocab", dictionary))

    for pair in pairs:
        for split, prefix in release_text(pair).items():
            for lang in pair.split("-"):
                raw, dst = Path(f"{prefix}.{lang}"), text / f"{split}.{pair}.{lang}"
                encode = partial(pipeline.apply_sentencepiece, text / "spm.model", raw, dst, workers=w, quiet=quiet)
                stages.run(f"encode.{split}.{pair}.{lang}", [dst], encode)

    with_valid = [l for l in langs if "valid" in release_text(pair_of(l))]
    # fairseq 0.12 validates on every pair of --lang-pairs and stops at one without a valid split
    language_lists = {
        "langs": sorted(set(langs) | {"en"}),
        "lang_pairs": [d for l in with_valid for d in (f"en-{l}", f"{l}-en")],
        "train_only_lang_pairs": [d for l in langs if l not in with_valid for d in (f"en-{l}", f"{l}-en")],
    }

    def binarise():
        with atomic_outputs([databin]) as (work,):
            for pair in pairs:
                prefixes = {split: str(text / f"{split}.{pair}") for split in release_text(pair)}
                dicts = ["--srcdict", str(dictionary), "--tgtdict", str(dictionary)]
                src, tgt = pair.split("-")
                pipeline.run_fairseq_preprocess(prefixes, src, tgt, work, w, *dicts)
            for name, values in language_lists.items():
                (work / f"{name}.txt").write_text(",".join(values) + "\n")
            (work / "preprocess.done").write_text(f"pairs: {' '.join(pairs)}\n")

    stages.run("binarise", [databin / "preprocess.done"], binarise, options={"pairs": pairs})
    test_text = []  # what sacreBLEU scores against: the release's test files as they are
    for pair in pairs:
        if "test" in release_text(pair):
            first, second = pair.split("-")
            for lang in (first, second):
                untouched = stages.test_text_path(f"test.{pair}", lang)
                copy = partial(pipeline.concatenate, [Path(f"{release_text(pair)['test']}.{lang}")], untouched)
                stages.run(f"untouched-test.{pair}.{lang}", [untouched], copy)
            test_text.append(pipeline.TestText("test", f"test.{pair}", (first, second), text / f"test.{pair}"))
    stages.summary(
        lambda: json.loads((tmp / "raw_pairs.json").read_text()),
        **language_lists,
        spm_vocab=args.spm_vocab,
        spm_model_type=args.spm_model_type,
        test_text=stages.test_text(test_text, lowercase=False),
    )
    return stages


def build_parser():
    parser = recipe_parser("opus100", __doc__)
    parser.add_argument(
        "--langs", default="all", help="non-English languages, comma-separated (e.g. de,fr,zh), or 'all' (the 99 pairs)"
    )
    parser.add_argument("--spm-vocab", type=int, default=64000, help="SentencePiece vocabulary (paper: 64k)")
    parser.add_argument("--spm-model-type", default="unigram", choices=["unigram", "bpe"])
    parser.add_argument("--spm-character-coverage", type=float, default=0.9995)
    parser.add_argument(
        "--spm-sample-lines",
        type=int,
        default=4_000_000,
        help="training pairs sampled (both sides used) for the SentencePiece model",
    )
    parser.add_argument("--temperature", type=float, default=5.0, help="sampling temperature over pairs")
    parser.add_argument("--seed", type=int, default=1)
    return add_common_options(parser, "data-bin/opus100", "OPUS100_BASE_URL")


main = partial(run_main, prepare, build_parser)

if __name__ == "__main__":
    raise SystemExit(main())
