"""Spanish-English Bible verses from Debian's SWORD packages: Reina-Valera 1909 and the World English Bible.

A real translation corpus that needs no dataset host: ``sword-text-sparv`` (module spaRV1909eb) and
``sword-text-web`` (engWEB2015eb), read with ``diatheke``, give about 30,000 verse pairs. The steps, and the
counts the Debian packages give: data-prep/README.md.

1. extract: each module's 66 canonical books as diatheke prints them (``orig/<module>.txt``).
2. align: verse pairs by (book, chapter, verse), kept or dropped a whole chapter at a time (``chapter_problem``):
   the two modules number some chapters differently (RV1909 follows the Hebrew chapter breaks in places), merge
   verses, or leave one empty. RV1909's psalm headings, part of verse 1 there and a heading in the WEB, are cut.
3. split: test, then valid, are whole chapters in a fixed pseudo-random order (``split_order``) until each holds
   ``--test-verses`` / ``--valid-verses`` pairs, so that no verse and no neighbour of a held-out verse is trained on.
4. The IWSLT-14 recipe's processing: Moses tokenisation, ``clean-corpus-n`` 1-175 ratio 1.5 on train, lowercase,
   joint BPE (``--bpe-merges``), ``fairseq-preprocess --joined-dictionary``.
"""

import hashlib
import json
import math
import re
import statistics
from functools import partial
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import DataError
from ..files import write_json, write_lines
from . import pipeline, sword
from .cli import add_common_options, recipe_parser, run_main
from .moses import TextSteps, clean_corpus, process_file

#: language -> (SWORD module, the Debian package that installs it)
MODULES = {"es": ("spaRV1909eb", "sword-text-sparv"), "en": ("engWEB2015eb", "sword-text-web")}
#: the module whose psalm headings are part of verse 1 (RV1909: "Salmo de David. JEHOVÁ es mi pastor")
HEADINGS_IN_VERSE_1 = "spaRV1909eb"
SPLITS = ("train", "valid", "test")
#: a chapter whose verse lengths match this much better shifted by 1 or 2 verses is numbered differently
SHIFT_BETTER = 0.8
#: a chapter whose mean verse-length mismatch exceeds this is dropped (about 4x the median verse's, 0.08 here)
MISMATCH_LIMIT = 0.3
#: the rules' version: a change re-runs the align stage
ALIGN_RULES = 1

Key = sword.Key
Chapter = Tuple[str, int]
_FIRST_WORD = re.compile(r"\b[A-ZÁÉÍÓÚÑÜ]{2,}\b")  # RV1909 capitalises each chapter's first word
_BEFORE_FIRST_WORD = re.compile(r"(?:[¿¡(«“]|\b[A-ZÁÉÍÓÚÑÜ]\b)\s*$")  # "¿POR qué", "A TI": part of the verse


def cut_heading(verse_1: str) -> str:
    """A psalm's verse 1 less the heading before its capitalised first word (the whole verse if there is none)."""
    found = _FIRST_WORD.search(verse_1)
    if found is None:
        return verse_1
    start = found.start()
    while (before := _BEFORE_FIRST_WORD.search(verse_1[:start])) is not None:
        start = before.start()
    return verse_1[start:]


def verse_texts(markup: Dict[Key, str], module: str) -> Dict[Key, str]:
    """Each entry's words (``sword.verse_text``), psalm headings cut where the module has them in verse 1."""
    texts = {key: sword.verse_text(m) for key, m in markup.items()}
    if module == HEADINGS_IN_VERSE_1:
        for key in [k for k in texts if k[0] == "Psalms" and k[2] == 1]:
            texts[key] = cut_heading(texts[key])
    return texts


def length_mismatch(a: Sequence[int], b: Sequence[int], centre: float, shift: int = 0) -> float:
    """Mean |log((b[i + shift] + 10) / (a[i] + 10)) - centre| over the verses both have: how badly the verse lengths
    of two sides disagree when verse i of one is paired with verse i + shift of the other."""
    pairs = [(a[i], b[i + shift]) for i in range(len(a)) if 0 <= i + shift < len(b)]
    return statistics.fmean(abs(math.log((y + 10) / (x + 10)) - centre) for x, y in pairs)


def chapter_problem(a: Dict[int, str], b: Dict[int, str], centre: float) -> Optional[str]:
    """Why a chapter (verse -> text on each side) cannot be paired verse by verse, or None. ``centre``: the median
    log length ratio of the corpus's verse pairs."""
    if a.keys() != b.keys():
        return f"verses {sorted(a.keys() ^ b.keys())} on one side only"
    verses = sorted(a)
    for side in (a, b):
        empty = [v for v in verses if not side[v]]
        if empty:
            return f"verse(s) {empty} empty on one side (merged into a neighbour or numbered elsewhere)"
        linked = [v for v, w in zip(verses, verses[1:]) if side[v] == side[w]]
        if linked:
            return f"verse(s) {linked} share one text with the next on one side (linked verses)"
    la, lb = [len(a[v]) for v in verses], [len(b[v]) for v in verses]
    here = length_mismatch(la, lb, centre)
    if len(verses) >= 3:
        shifted = min((length_mismatch(la, lb, centre, s), s) for s in (-2, -1, 1, 2))
        if shifted[0] < SHIFT_BETTER * here:
            return f"verse lengths match better shifted by {shifted[1]} verse(s) ({shifted[0]:.2f} vs {here:.2f})"
    if here > MISMATCH_LIMIT:
        return f"verse lengths disagree (mean mismatch {here:.2f} > {MISMATCH_LIMIT})"
    return None


def align(a: Dict[Key, str], b: Dict[Key, str]) -> Tuple[List[Tuple[Key, str, str]], Dict[str, str]]:
    """Verse pairs of two modules' texts in canonical order, and the chapters dropped with their reasons
    (``"Book C": reason``): a chapter is kept whole, or dropped whole, by ``chapter_problem``."""
    order = {book: i for i, book in enumerate(sword.BOOKS)}
    chapters: Dict[Chapter, Tuple[Dict[int, str], Dict[int, str]]] = {}
    for side, texts in enumerate((a, b)):
        for (book, chapter, verse), text in texts.items():
            chapters.setdefault((book, chapter), ({}, {}))[side][verse] = text
    ratios = [math.log((len(b[k]) + 10) / (len(a[k]) + 10)) for k in a.keys() & b.keys() if a[k] and b[k]]
    if not ratios:
        raise DataError("the two modules have no verse in common: not two Bibles with the canon's book names")
    centre = statistics.median(ratios)
    pairs, dropped = [], {}
    for book, chapter in sorted(chapters, key=lambda c: (order[c[0]], c[1])):
        side_a, side_b = chapters[(book, chapter)]
        problem = chapter_problem(side_a, side_b, centre)
        if problem:
            dropped[f"{book} {chapter}"] = problem
            continue
        pairs += [((book, chapter, v), side_a[v], side_b[v]) for v in sorted(side_a)]
    return pairs, dropped


def split_order(chapter: Chapter) -> str:
    """The held-out splits take chapters in this order: a hash, so fixed and spread over the whole canon."""
    return hashlib.sha1(f"{chapter[0]} {chapter[1]}".encode()).hexdigest()


def split_chapters(keys: Sequence[Key], sizes: Dict[str, int]) -> Dict[Chapter, str]:
    """Chapter -> split: each held-out split of ``sizes`` (in order) takes whole chapters in ``split_order`` until it
    holds at least its number of verses; every other chapter is train."""
    verses: Dict[Chapter, int] = {}
    for book, chapter, _ in keys:
        verses[(book, chapter)] = verses.get((book, chapter), 0) + 1
    queue = sorted(verses, key=split_order)
    assigned: Dict[Chapter, str] = {}
    for split, wanted in sizes.items():
        held = 0
        while held < wanted and queue:
            taken = queue.pop(0)
            assigned[taken], held = split, held + verses[taken]
    if not queue:
        raise DataError(f"{len(keys)} verse pairs leave no training text after {sizes}: ask for fewer held-out verses")
    return {**{c: "train" for c in queue}, **assigned}


def extract(diatheke: str, module: str, out: Path):
    (out.parent).mkdir(parents=True, exist_ok=True)
    text = sword.read_module(diatheke, module)
    if not sword.parse_entries(text):
        raise DataError(f"diatheke printed no verse of {module}: is it a Bible module? (its output is in {out})")
    write_lines(out, text.splitlines())


def write_aligned(dumps: Dict[str, Path], modules: Dict[str, str], out: Path, dropped_file: Path):
    """``align`` of the two dumps: ``out.<lang>`` the verses, ``out.keys`` their references, ``dropped_file`` the
    chapters left out with their reasons."""
    langs = list(dumps)
    texts = [verse_texts(sword.parse_entries(dumps[l].read_text(encoding="utf-8")), modules[l]) for l in langs]
    pairs, dropped = align(*texts)
    write_lines(Path(f"{out}.keys"), [f"{b}\t{c}\t{v}" for (b, c, v), _, _ in pairs])
    for side, lang in enumerate(langs):
        write_lines(Path(f"{out}.{lang}"), [pair[1] if side == 0 else pair[2] for pair in pairs])
    write_json(dropped_file, dropped)


def read_keys(path: Path) -> List[Key]:
    rows = [line.rstrip("\n").split("\t") for line in open(path, encoding="utf-8")]
    return [(book, int(chapter), int(verse)) for book, chapter, verse in rows]


def write_splits(aligned: Path, langs: Sequence[str], sizes: Dict[str, int], tmp: Path):
    """``tmp/<split>.raw.<lang>`` and ``tmp/<split>.keys`` from the aligned verses (``split_chapters``)."""
    keys = read_keys(Path(f"{aligned}.keys"))
    chapter_split = split_chapters(keys, sizes)
    lines = {lang: Path(f"{aligned}.{lang}").read_text(encoding="utf-8").splitlines() for lang in langs}
    for split in SPLITS:
        chosen = [i for i, key in enumerate(keys) if chapter_split[key[:2]] == split]
        write_lines(tmp / f"{split}.keys", ["\t".join(map(str, keys[i])) for i in chosen])
        for lang in langs:
            write_lines(tmp / f"{split}.raw.{lang}", [lines[lang][i] for i in chosen])


#: beside the data-bin: the test verses as the modules give them, and the chapter of each (sacreBLEU's references and
#: the unit its significance test resamples)
TEST_TEXT = "test-text"


def write_test_text(tmp: Path, langs: Sequence[str], out: Path):
    """``out/test.<lang>``: the held-out test verses before any tokenising or lowercasing; ``out/test.chapters``: the
    book and chapter of each line."""
    out.mkdir(parents=True, exist_ok=True)
    for lang in langs:
        write_lines(out / f"test.{lang}", (tmp / f"test.raw.{lang}").read_text(encoding="utf-8").splitlines())
    write_lines(out / "test.chapters", [f"{book} {chapter}" for book, chapter, _ in read_keys(tmp / "test.keys")])


def test_text_record(stages: pipeline.RecipeStages, langs: Sequence[str], text: Path) -> dict:
    """``summary.json``'s ``test_text`` (``RecipeStages.test_text``: the recipe lowercases), its one test set with the
    file of its verses' chapters (``documents``): the unit the study's significance test resamples."""
    record = stages.test_text([pipeline.TestText("test", "test", (langs[0], langs[1]), text / "test")], lowercase=True)
    record["sets"][0]["documents"] = f"{TEST_TEXT}/test.chapters"
    return record


def prepare(args) -> pipeline.Stages:
    if {args.src, args.tgt} != set(MODULES):
        raise DataError(
            f"the Bible recipe is Spanish-English: use --src es --tgt en or --src en --tgt es "
            f"(got --src {args.src} --tgt {args.tgt})"
        )
    langs = (args.src, args.tgt)
    modules = {lang: MODULES[lang][0] for lang in langs}
    stages = pipeline.RecipeStages("bible", args, args.out or f"data-bin/bible.{args.src}-{args.tgt}")
    tmp, text, w, quiet = stages.tmp, stages.text, args.workers, args.quiet
    diatheke = sword.ensure_modules(args.diatheke, dict(MODULES[l] for l in langs), install=not args.no_install)

    dumps = {lang: stages.orig / f"{modules[lang]}.txt" for lang in langs}
    for lang in langs:
        options = {"module": modules[lang], "version": sword.module_version(modules[lang]), "key": sword.CANON}
        stages.run(f"extract.{lang}", [dumps[lang]], partial(extract, diatheke, modules[lang], dumps[lang]), options)
    aligned, dropped_file = tmp / "aligned", tmp / "dropped-chapters.json"
    outputs = [Path(f"{aligned}.{l}") for l in (*langs, "keys")] + [dropped_file]
    align_stage = partial(write_aligned, dumps, modules, aligned, dropped_file)
    stages.run("align", outputs, align_stage, {"rules": ALIGN_RULES, "shift": SHIFT_BETTER, "limit": MISMATCH_LIMIT})
    sizes = {"test": args.test_verses, "valid": args.valid_verses}
    split_outputs = [tmp / f"{s}.{x}" for s in SPLITS for x in ("keys", *(f"raw.{l}" for l in langs))]
    split = partial(write_splits, aligned, langs, sizes, tmp)
    stages.run("split", split_outputs, split, stages.options("test_verses", "valid_verses"))

    steps = {lang: TextSteps(lang=lang) for lang in langs}
    for s in SPLITS:
        for lang in langs:
            tokenize = partial(
                process_file, steps[lang], tmp / f"{s}.raw.{lang}", tmp / f"{s}.tok.{lang}", workers=w, quiet=quiet
            )
            stages.run(f"tokenize.{s}.{lang}", [tmp / f"{s}.tok.{lang}"], tokenize)
    clean_prefix = tmp / "train.clean"
    clean = partial(clean_corpus, str(tmp / "train.tok"), *langs, str(clean_prefix), 1, 175, 1.5)
    stages.run("clean", [Path(f"{clean_prefix}.{l}") for l in langs], clean)
    lowercase = {lang: TextSteps(lang=lang, tokenize=False, lowercase=True) for lang in langs}
    for s in SPLITS:
        source = "train.clean" if s == "train" else f"{s}.tok"
        for lang in langs:
            lower = partial(process_file, lowercase[lang], tmp / f"{source}.{lang}", tmp / f"{s}.{lang}", quiet=quiet)
            stages.run(f"lowercase.{s}.{lang}", [tmp / f"{s}.{lang}"], lower)

    codes = text / "code"
    learn = partial(pipeline.learn_joint_bpe, [tmp / f"train.{l}" for l in langs], codes, args.bpe_merges, workers=w)
    stages.run("learn-bpe", [codes], learn, options=stages.options("bpe_merges"))
    for s in SPLITS:
        for lang in langs:
            src, dst = tmp / f"{s}.{lang}", text / f"{s}.{lang}"
            stages.run(f"apply-bpe.{s}.{lang}", [dst], partial(pipeline.apply_bpe, codes, src, dst, workers=w))

    stages.binarise({s: str(text / s) for s in SPLITS})
    # last, so that adding it redid no stage before it (the data-bin of earlier runs is this one)
    test_text = stages.out / TEST_TEXT
    keep = partial(write_test_text, tmp, langs, test_text)
    stages.run("test-text", [test_text / f"test.{x}" for x in (*langs, "chapters")], keep)
    test_steps = TextSteps(lang=args.src, lowercase=True)  # what raw input to the model goes through

    def verse_counts():
        dropped = json.loads(dropped_file.read_text(encoding="utf-8"))
        return {
            "aligned": pipeline.count_lines(Path(f"{aligned}.keys")),
            "chapters_dropped": len(dropped),
            "held_out_by_chapter": {s: pipeline.count_lines(tmp / f"{s}.keys") for s in SPLITS},
            "train_after_cleaning": pipeline.count_lines(Path(f"{clean_prefix}.{langs[0]}")),
        }

    stages.summary(
        lambda: {s: pipeline.same_length([text / f"{s}.{l}" for l in langs]) for s in SPLITS},
        verses=verse_counts(),
        modules={lang: {"module": modules[lang], "version": sword.module_version(modules[lang])} for lang in langs},
        references={s: str(tmp / f"{s}.raw.{args.tgt}") for s in ("valid", "test")},
        test_text=test_text_record(stages, langs, text),
        bpe_merges=args.bpe_merges,
        translation=stages.translation(test_steps, "subword_nmt", codes),
    )
    return stages


def build_parser():
    parser = recipe_parser("bible", __doc__)
    parser.add_argument("--src", default="es", help="source language (es or en)")
    parser.add_argument("--tgt", default="en", help="target language (en or es)")
    parser.add_argument("--bpe-merges", type=int, default=8000, help="joint BPE merges (default 8000)")
    parser.add_argument("--valid-verses", type=int, default=800, help="held-out validation verses, whole chapters")
    parser.add_argument("--test-verses", type=int, default=800, help="held-out test verses, whole chapters")
    parser.add_argument("--diatheke", default="diatheke", help="the diatheke program (a name on PATH or a path)")
    parser.add_argument(
        "--no-install",
        action="store_true",
        help="never run apt-get: stop with the command to run when diatheke or a module is missing",
    )
    return add_common_options(parser, "data-bin/bible.SRC-TGT")


main = partial(run_main, prepare, build_parser)

if __name__ == "__main__":
    raise SystemExit(main())
