"""OPUS-100 v1.0 (English-centric, 99 pairs with English), for fairseq's
``translation_multi_simple_epoch`` task.

1. One archive per pair, ``opus-100-corpus-<pair>-v1.0.tar.gz`` (pair = the two
   codes in alphabetical order, e.g. ``de-en``, ``en-fr``), holding
   ``opus-100-corpus/v1.0/supervised/<pair>/opus.<pair>-{train,dev,test}.<lang>``.
   Five pairs (an, dz, hy, mn, yo with English) have no dev/test in the release.
2. A joint SentencePiece model (default 64,000 pieces, as the OPUS-100 paper)
   trained on a sample of the training text of all selected pairs; each pair's
   share is proportional to n^(1/T) (T = 5, the paper's sampling temperature),
   so small languages are not drowned out.
3. Every split encoded into pieces (``text/{train,valid,test}.<pair>.<lang>``; the
   release's ``dev`` is fairseq's ``valid``), no Moses tokenisation.
4. ``fairseq-preprocess`` per pair into one ``bin/`` with the shared dictionary
   (``dict.<lang>.txt`` for every language), plus ``bin/langs.txt`` and
   ``bin/lang_pairs.txt`` (both directions of every pair that has a dev set) for
   ``--langs`` and ``--lang-pairs``; fairseq reads a ``de-en`` pair for ``en-de``
   as well. fairseq 0.12 validates on every pair of ``--lang-pairs`` and stops
   when one has no valid split, so the directions of the five train-only pairs
   are listed apart, in ``bin/train_only_lang_pairs.txt``.
"""

import argparse
import json
import math
import os
import random
import shutil
import tarfile
from pathlib import Path

from ..errors import DataError
from . import pipeline
from .cli import ArchiveSource, add_common_options, add_download_options, run_main
from .download import Checksums
from .formats import utf8_lines, write_lines

SPLITS = {"train": "train", "dev": "valid", "test": "test"}  # release name -> fairseq name


def pair_of(lang: str) -> str:
    return "-".join(sorted([lang, "en"]))


def archive_name(pair: str) -> str:
    return f"opus-100-corpus-{pair}-v1.0.tar.gz"


def release_languages(checksums: Checksums):
    prefix, suffix = "opus-100-corpus-", "-v1.0.tar.gz"
    langs = []
    for name in checksums.data.get("archives", {}):
        if name.startswith(prefix) and name.endswith(suffix) and name != "opus-100-corpus-zeroshot-v1.0.tar.gz":
            a, b = name[len(prefix) : -len(suffix)].split("-")
            langs.append(b if a == "en" else a)
    return sorted(langs)


def parse_langs(value: str, checksums: Checksums):
    known = release_languages(checksums)
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
    with pipeline.atomic_outputs([out]) as (tmp,), open(tmp, "w", encoding="utf-8") as g:
        for p in pairs:
            quota = min(counts[p], max(1, math.floor(total * weights[p] / sum(weights.values()))))
            chosen = set(rng.sample(range(counts[p]), quota))
            for lang in p.split("-"):
                lines = utf8_lines(orig / p / f"opus.{p}-train.{lang}")
                g.writelines(line for i, line in enumerate(lines) if i in chosen)


def prepare(args) -> pipeline.Stages:
    out = Path(args.out or "data-bin/opus100")
    orig, tmp, text, databin = out / "orig", out / "tmp", out / "text", out / "bin"
    source = ArchiveSource(args, out)
    langs = parse_langs(args.langs, source.checksums)
    pairs = [pair_of(l) for l in langs]
    stages = pipeline.Stages(out / "stages.json", force=args.force)
    w, quiet = args.workers, args.quiet

    def extract(pair):
        path = source.fetch(archive_name(pair))
        inner = f"opus-100-corpus/v1.0/supervised/{pair}"
        try:
            with tarfile.open(path) as tar:
                names = set(tar.getnames())
        except (tarfile.TarError, EOFError, OSError) as e:
            raise DataError(f"cannot read archive {path}: {e}") from None
        members = [f"{inner}/opus.{pair}-{s}.{l}" for s in SPLITS for l in pair.split("-")]
        present = [m for m in members if m in names]
        if not any(m.endswith(f"-train.{pair.split('-')[0]}") for m in present):
            raise DataError(f"archive {path} has no {inner}/opus.{pair}-train.*: not an OPUS-100 v1.0 pair archive")
        source.extract(archive_name(pair), present, tmp / f"extract.{pair}")
        dest = orig / pair
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp / f"extract.{pair}" / inner, dest)
        shutil.rmtree(tmp / f"extract.{pair}")

    for pair in pairs:
        stages.run(
            f"extract.{pair}", [orig / pair], lambda p=pair: extract(p), options=source.identity(archive_name(pair))
        )

    def splits_of(pair):
        return [s for s in SPLITS if (orig / pair / f"opus.{pair}-{s}.en").exists()]

    def check():
        found = {}
        for pair in pairs:
            l1, l2 = pair.split("-")
            found[pair] = {
                SPLITS[s]: pipeline.check_parallel(str(orig / pair / f"opus.{pair}-{s}"), l1, l2)
                for s in splits_of(pair)
            }
        write_lines(tmp / "raw_pairs.json", [json.dumps(found, indent=1)])

    stages.run("check", [tmp / "raw_pairs.json"], check, options={"pairs": pairs})

    sample = tmp / "spm.sample.txt"
    stages.run(
        "spm-sample",
        [sample],
        lambda: sample_for_spm(pairs, orig, sample, args.spm_sample_lines, args.temperature, args.seed),
        options={
            "pairs": pairs,
            "spm_sample_lines": args.spm_sample_lines,
            "temperature": args.temperature,
            "seed": args.seed,
        },
    )
    model = text / "spm"
    stages.run(
        "spm-train",
        [text / "spm.model", text / "spm.vocab"],
        lambda: pipeline.train_sentencepiece(
            sample,
            model,
            args.spm_vocab,
            model_type=args.spm_model_type,
            character_coverage=args.spm_character_coverage,
            workers=w,
            force=True,
        ),
        options={
            "spm_vocab": args.spm_vocab,
            "spm_model_type": args.spm_model_type,
            "spm_character_coverage": args.spm_character_coverage,
        },
    )
    dictionary = text / "dict.txt"
    stages.run(
        "dictionary",
        [dictionary],
        lambda: pipeline.sentencepiece_dictionary(text / "spm.vocab", dictionary, force=True),
    )

    for pair in pairs:
        for split in splits_of(pair):
            for lang in pair.split("-"):
                dst = text / f"{SPLITS[split]}.{pair}.{lang}"
                stages.run(
                    f"encode.{SPLITS[split]}.{pair}.{lang}",
                    [dst],
                    lambda s=split, p=pair, l=lang, d=dst: pipeline.apply_sentencepiece(
                        text / "spm.model", orig / p / f"opus.{p}-{s}.{l}", d, force=True, workers=w, quiet=quiet
                    ),
                )

    all_langs = sorted(set(langs) | {"en"})
    with_valid = [l for l in langs if "dev" in splits_of(pair_of(l))]
    directions = [d for l in with_valid for d in (f"en-{l}", f"{l}-en")]
    train_only = [d for l in langs if l not in with_valid for d in (f"en-{l}", f"{l}-en")]

    def binarise():
        work = Path(f"{databin}.tmp{os.getpid()}")
        if work.exists():
            shutil.rmtree(work)
        try:
            for pair in pairs:
                l1, l2 = pair.split("-")
                argv = [
                    "--source-lang",
                    l1,
                    "--target-lang",
                    l2,
                    "--destdir",
                    str(work),
                    "--workers",
                    str(w),
                    "--srcdict",
                    str(dictionary),
                    "--tgtdict",
                    str(dictionary),
                ]
                for split in splits_of(pair):
                    argv += [f"--{SPLITS[split]}pref", str(text / f"{SPLITS[split]}.{pair}")]
                pipeline.run_fairseq_preprocess(argv)
            (work / "langs.txt").write_text(",".join(all_langs) + "\n")
            (work / "lang_pairs.txt").write_text(",".join(directions) + "\n")
            (work / "train_only_lang_pairs.txt").write_text(",".join(train_only) + "\n")
            (work / "preprocess.done").write_text(f"pairs: {' '.join(pairs)}\n")
            if databin.exists():
                shutil.rmtree(databin)
            os.replace(work, databin)
        finally:
            if work.exists():
                shutil.rmtree(work)

    stages.run("binarise", [databin / "preprocess.done"], binarise, options={"pairs": pairs})

    def summary():
        raw = json.loads((tmp / "raw_pairs.json").read_text())
        info = {
            "recipe": "opus100",
            "pairs": raw,
            "langs": all_langs,
            "lang_pairs": directions,
            "train_only_lang_pairs": train_only,
            "spm_vocab": args.spm_vocab,
            "spm_model_type": args.spm_model_type,
            "data_bin": str(databin),
            "options": vars(args),
        }
        write_lines(out / "summary.json", [json.dumps(info, indent=1)])

    stages.run("summary", [out / "summary.json"], summary, options=vars(args))
    return stages


def build_parser():
    parser = argparse.ArgumentParser(
        prog="prepare-opus100.sh",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    add_common_options(parser, default_out="data-bin/opus100")
    add_download_options(parser, "OPUS100_BASE_URL")
    return parser


def main(argv=None) -> int:
    return run_main(prepare, build_parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
