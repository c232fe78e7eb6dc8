"""Small archives with the layout and formats of the real releases, for the data-prep tests.

* IWSLT-14 ``de-en.tgz``: ``de-en/train.tags.de-en.{de,en}`` (talk metadata lines
  ``<url>``, ``<keywords>``, ``<talkid>``, ``<title>``, ``<description>`` around the
  text) and the five XML test sets with ``<seg id="N">`` lines.
* WMT'14: europarl-v7 / commoncrawl / news-commentary-v12 training tarballs,
  the WMT17 ``dev.tgz`` (SGML newstest2010-2016, both naming schemes) and
  ``test-full.tgz`` (newstest2014 SGML).
* OPUS-100 v1.0: one ``opus-100-corpus-<pair>-v1.0.tar.gz`` per pair, holding
  ``opus-100-corpus/v1.0/supervised/<pair>/opus.<pair>-{train,dev,test}.<lang>``.

Every sentence pair carries its id as a number on both sides, so tests can
check alignment and disjointness after tokenisation and subwords. The builders
return the counts the recipes must produce.
"""

import hashlib
import io
import json
import random
import tarfile
from pathlib import Path

DE = "der die das und ist nicht ein eine wir sie haus welt zeit leben wasser stadt kind frage menschen arbeit".split()
EN = "the a and is not we they house world time life water city child question people work of to in".split()
FR = "le la les et est pas un une nous ils maison monde temps vie eau ville enfant question gens travail".split()
YO = "ati ni ko si awa won ile aye igba aye omi ilu omo ibeere eniyan ise ti fun ninu bi".split()
WORDS = {"de": DE, "en": EN, "fr": FR, "yo": YO}


def sentence(lang, ident, rng, n_words, punct="."):
    words = [rng.choice(WORDS[lang]) for _ in range(n_words)]
    return " ".join([words[0].capitalize(), str(ident)] + words[1:]) + punct


def pair(ident, rng, lo=4, hi=14, langs=("de", "en")):
    n = rng.randint(lo, hi)
    return {lang: sentence(lang, ident, rng, n) for lang in langs}


def make_tgz(path: Path, files: dict):
    """A gzipped tarball holding ``files`` (archive path -> text), deterministic bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(files):
            data = files[name].encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_checksums(path: Path, archives, extra=None):
    """A checksums file for the fixture archives (the real ones' checksums cannot match them)."""
    entries = {
        a.name: {"url": f"https://example.invalid/{a.name}", "size": a.stat().st_size, "sha256": sha256(a)}
        for a in archives
    }
    entries.update(extra or {})
    path.write_text(json.dumps({"archives": entries}, indent=1))
    return path


# ---------------------------------------------------------------- IWSLT-14

IWSLT_TEST_SETS = (
    "IWSLT14.TED.dev2010",
    "IWSLT14.TEDX.dev2012",
    "IWSLT14.TED.tst2010",
    "IWSLT14.TED.tst2011",
    "IWSLT14.TED.tst2012",
)


def build_iwslt(root: Path, talks=4, lines_per_talk=120, seed=1):
    """``de-en.tgz`` and the counts the recipe implies for it."""
    rng = random.Random(seed)
    train = {"de": [], "en": []}
    kept = 0  # lines that survive the tag filter and the 1-175 / 1.5 cleaning
    ident = 0
    for t in range(1, talks + 1):
        meta = {
            "de": [
                f"<url>http://www.ted.com/talks/lang/de/talk_{t}.html</url>",
                "<keywords>talks, wasser, welt</keywords>",
                f"<talkid>{t}</talkid>",
                f"<title>Sprecherin {90000 + t}: Das Haus</title>",
                f"<description>TED Talk Untertitel und Transkript: Vortrag {91000 + t}.</description>",
            ],
            "en": [
                f"<url>http://www.ted.com/talks/talk_{t}.html</url>",
                "<keywords>talks, water, world</keywords>",
                f"<talkid>{t}</talkid>",
                f"<title>Speaker {90000 + t}: The house</title>",
                f"<description>TED Talk Subtitles and Transcript: Talk {91000 + t}.</description>",
            ],
        }
        for lang in ("de", "en"):
            train[lang] += meta[lang]
        kept += 2  # title and description lines stay, without their tags
        for k in range(lines_per_talk):
            ident += 1
            p = pair(ident, rng)
            if k == 5:  # too long for 1-175 tokens
                p = {lang: sentence(lang, ident, rng, 190) for lang in ("de", "en")}
            elif k == 9:  # length ratio above 1.5
                p = {"de": sentence("de", ident, rng, 3), "en": sentence("en", ident, rng, 20)}
            elif k == 13:  # empty on both sides
                p = {"de": "", "en": ""}
            else:
                kept += 1
            if k == 2:  # quotes and apostrophes, escaped by the Moses tokenizer
                p = {"de": f'Sie sagte " {ident} " und das ist es.', "en": f'She said " {ident} " and it\'s that.'}
            for lang in ("de", "en"):
                train[lang].append(p[lang])
    files = {f"de-en/train.tags.de-en.{lang}": "\n".join(train[lang]) + "\n" for lang in ("de", "en")}
    test_pairs = 0
    for s, name in enumerate(IWSLT_TEST_SETS):
        segs = [pair(100000 + 1000 * s + i, rng) for i in range(1, 7)]
        segs[0] = {"de": f"Es ist {100000 + 1000 * s + 1} Uhr.", "en": f"It\u2019s {100000 + 1000 * s + 1} o'clock."}
        test_pairs += len(segs)
        for lang, tag, extra in (
            ("de", "srcset", 'srclang="german"'),
            ("en", "refset", 'srclang="german" trglang="english" refid="ref"'),
        ):
            body = [
                '<?xml version="1.0" encoding="UTF-8"?>',
                "<mteval>",
                f'<{tag} setid="iwslt2014-{name}" {extra}>',
                '<doc docid="535" genre="lectures">',
                "<url>http://www.ted.com/talks/x.html</url>",
                "<description>A talk about <b>things</b>.</description>",
                "<keywords>talks</keywords>",
                "<talkid>535</talkid>",
                "<title>A title</title>",
            ]
            body += [f'<seg id="{i}"> {seg[lang]} </seg>' for i, seg in enumerate(segs, start=1)]
            body += ["</doc>", f"</{tag}>", "</mteval>"]
            files[f"de-en/{name}.de-en.{lang}.xml"] = "\n".join(body) + "\n"
    files["de-en/README"] = "IWSLT 2014 de-en fixture\n"
    archive = make_tgz(root / "de-en.tgz", files)
    valid = kept // 23
    return archive, {"train": kept - valid, "valid": valid, "test": test_pairs}


# ---------------------------------------------------------------- WMT'14


def _sgm(setid, lang, role, segs):
    tag = "srcset" if role == "src" else "refset"
    lines = [
        f'<{tag} setid="{setid}" srclang="any"' + ("" if role == "src" else f' trglang="{lang}"') + ">",
        '<doc sysid="ref" docid="1012-bbc" genre="news" origlang="en">',
        "<p>",
    ]
    lines += [f'<seg id="{i}">{s}</seg>' for i, s in enumerate(segs, start=1)]
    lines += ["</p>", "</doc>", f"</{tag}>"]
    return "\n".join(lines) + "\n"


WMT_DEV_YEARS = (2010, 2011, 2012, 2013, 2015, 2016)


def build_wmt(root: Path, per_corpus=150, seed=2):
    """The five WMT'14 archives fairseq's recipe uses, and the counts the recipe implies."""
    rng = random.Random(seed)
    ident, kept = 0, 0
    corpora = {}
    for name in ("europarl-v7", "commoncrawl", "news-commentary-v12"):
        sides = {"de": [], "en": []}
        for k in range(per_corpus):
            ident += 1
            p = pair(ident, rng, 4, 12)
            if k == 7:
                p = {"de": "", "en": ""}  # europarl's paragraph breaks
            elif k == 11:
                p = {lang: sentence(lang, ident, rng, 300) for lang in ("de", "en")}  # over 250 tokens
            elif k == 17:
                p = {"de": sentence("de", ident, rng, 2), "en": sentence("en", ident, rng, 24)}  # ratio
            else:
                kept += 1
            if k == 3:  # punctuation normalisation and a control character
                p = {
                    "de": f"\u201eDas Haus\u201c ist {ident} \u2013 gut\u00a0!\x07",
                    "en": f"\u201cThe house\u201d is {ident} \u2013 good\u00a0!\x07",
                }
            for lang in ("de", "en"):
                sides[lang].append(p[lang])
        corpora[name] = sides
    files = {
        "training-parallel-europarl-v7.tgz": {
            **{f"training/europarl-v7.de-en.{l}": "\n".join(corpora["europarl-v7"][l]) + "\n" for l in ("de", "en")},
            "training/europarl-v7.fr-en.fr": "Bonjour.\n",
            "training/europarl-v7.fr-en.en": "Hello.\n",
        },
        "training-parallel-commoncrawl.tgz": {
            **{f"commoncrawl.de-en.{l}": "\n".join(corpora["commoncrawl"][l]) + "\n" for l in ("de", "en")},
            "commoncrawl.fr-en.fr": "Bonjour.\n",
            "commoncrawl.fr-en.en": "Hello.\n",
        },
        "training-parallel-nc-v12.tgz": {
            f"training/news-commentary-v12.de-en.{l}": "\n".join(corpora["news-commentary-v12"][l]) + "\n"
            for l in ("de", "en")
        },
    }
    test_sizes = {}
    dev = {}
    for y in WMT_DEV_YEARS + (2014,):
        segs = [pair(200000 + 1000 * (y - 2000) + i, rng, 3, 10) for i in range(1, 5 + y % 3)]
        segs[0] = {
            "de": f"Er sagt, es ist {200000 + 1000 * (y - 2000) + 1}\u2019s Haus.",
            "en": f"He says it\u2019s the {200000 + 1000 * (y - 2000) + 1} house.",
        }
        test_sizes[f"newstest{y}"] = len(segs)
        for lang in ("de", "en"):
            other = [s[lang] for s in segs]
            if y <= 2013:  # multi-way sets: newstestYYYY-{src,ref}.LANG.sgm
                for role in ("src", "ref"):
                    dev[f"dev/newstest{y}-{role}.{lang}.sgm"] = _sgm(f"newstest{y}", lang, role, other)
            else:  # newstestYYYY-{deen,ende}-{src,ref}.LANG.sgm
                for direction, src_lang in (("deen", "de"), ("ende", "en")):
                    role = "src" if lang == src_lang else "ref"
                    dev[f"dev/newstest{y}-{direction}-{role}.{lang}.sgm"] = _sgm(f"newstest{y}", lang, role, other)
        if y == 2014:
            files["test-full.tgz"] = {
                f"test-full/newstest2014-deen-{'src' if lang == 'de' else 'ref'}.{lang}.sgm": _sgm(
                    "newstest2014", lang, "src" if lang == "de" else "ref", [s[lang] for s in segs]
                )
                for lang in ("de", "en")
            }
            files["test-full.tgz"].update(
                {
                    f"test-full/newstest2014-deen-{'ref' if lang == 'de' else 'src'}.{lang}.sgm": _sgm(
                        "newstest2014", lang, "ref" if lang == "de" else "src", [s[lang] for s in segs]
                    )
                    for lang in ("de", "en")
                }
            )
    dev["dev/newstest2013.de"] = "plain text copy\n"
    files["dev.tgz"] = dev
    archives = [make_tgz(root / name, content) for name, content in files.items()]
    return archives, {"train": kept, "tests": test_sizes}


# ---------------------------------------------------------------- OPUS-100

OPUS_TRAIN_ONLY = {"yo"}


def build_opus(root: Path, langs=("de", "fr", "yo"), train=120, dev=12, test=12, seed=3):
    rng = random.Random(seed)
    archives, sizes = [], {}
    ident = 300000
    for lang in langs:
        pair_name = "-".join(sorted([lang, "en"]))
        files = {}
        splits = {"train": train} if lang in OPUS_TRAIN_ONLY else {"train": train, "dev": dev, "test": test}
        for split, n in splits.items():
            rows = []
            for _ in range(n):
                ident += 1
                rows.append(pair(ident, rng, 3, 10, langs=(lang, "en")))
            for side in (lang, "en"):
                files[f"opus-100-corpus/v1.0/supervised/{pair_name}/opus.{pair_name}-{split}.{side}"] = (
                    "\n".join(r[side] for r in rows) + "\n"
                )
        sizes[pair_name] = splits
        archives.append(make_tgz(root / f"opus-100-corpus-{pair_name}-v1.0.tar.gz", files))
    return archives, sizes


def write_parallel(prefix: Path, rows, langs):
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for lang in langs:
        Path(f"{prefix}.{lang}").write_text("".join(r[lang] + "\n" for r in rows), encoding="utf-8")


# ---------------------------------------------------------------- monolingual text


def write_monolingual(root: Path, sizes=(("train", 300), ("valid", 20), ("test", 20)), lang="en", seed=5):
    """``root/<split>.txt`` of numbered sentences (split k's ids start at k * 1000 + 1); returns the paths."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = {}
    for k, (split, n) in enumerate(sizes):
        rows = [sentence(lang, k * 1000 + i, rng, rng.randint(4, 14)) for i in range(1, n + 1)]
        if k == 0:
            rows[3] = f'She said " {rows[3]} " and it\'s that.'  # quotes and apostrophes, escaped by Moses
        paths[split] = root / f"{split}.txt"
        paths[split].write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return paths


# --- the SWORD Bible modules, as diatheke prints them (data-prep/prepare-bible.sh) ---

ES = "el la los y es no un una casa mundo tiempo vida agua ciudad hijo pregunta pueblo obra de en".split()
WORDS["es"] = ES
BIBLE_MODULES = {"es": "spaRV1909eb", "en": "engWEB2015eb"}
#: (book, chapters, verses per chapter) of the fixture's canon, in canonical order
BIBLE_BOOKS = (("Genesis", 8, 12), ("Job", 3, 10), ("Psalms", 4, 6), ("Matthew", 8, 12), ("III John", 1, 14))
#: the chapters the recipe must drop, with the start of the reason it must give
BIBLE_DROPPED = {
    "Job 1": "verse(s) [10] empty on one side",  # its last verse numbered as Job 2:1 in Spanish (as RV1909's Job 38/39)
    "Job 2": "verse lengths match better shifted by",
    "Matthew 3": "verse(s) [5] share one text with the next on one side (linked verses)",
    "III John 1": "verses [14] on one side only",
}


def _markup(text: str, lang: str) -> str:
    """``text`` in the modules' markup: words in ``<w>`` with Strong's numbers, the English module writing some
    words with no space between their elements (``God</w><w>created``), the Spanish one supplied words in
    ``<transChange>``."""
    words = text.split(" ")
    out = []
    for i, word in enumerate(words):
        if lang == "es" and i == 2:
            out.append(f'<transChange type="added">{word}</transChange>')
        else:
            out.append(f'<w savlm="strong:H{1000 + i:04d}">{word}</w>')
    joined = " ".join(out[:2]) + ("" if lang == "en" else " ") + " ".join(out[2:]) if len(out) > 2 else " ".join(out)
    return joined


def _verse_words(lang: str, ident: int, n_words: int, rng) -> str:
    """A verse of ``n_words`` words carrying its id, the same id and word count on both sides."""
    words = [rng.choice(WORDS[lang]) for _ in range(n_words)]
    return " ".join([words[0], f"v{ident}", *words[1:]]) + "."


def build_bible(root: Path, seed=7):
    """``root/<module>.txt``, what ``diatheke -b <module> -k <canon>`` prints for the Spanish and the English module,
    with what the real ones hold: pre-verse material before a key (a psalm's heading, repeated stale on later lines),
    a heading and a footnote inside a verse, psalm headings inside the Spanish verse 1, back matter after the last
    verse, a book outside the canon, the module-name trailer, and the planted misalignments of ``BIBLE_DROPPED``.
    Returns the verse pairs that must survive, ``{(book, chapter, verse): id}``."""
    import random

    rng = random.Random(seed)
    lines = {"es": [], "en": []}
    kept = {}
    ident, moved = 0, ""
    for book, chapters, verses in BIBLE_BOOKS:
        for chapter in range(1, chapters + 1):
            texts = {"es": {}, "en": {}}
            for verse in range(1, verses + 1):
                ident += 1
                n = rng.randint(3, 25)
                for lang in ("es", "en"):
                    state = random.Random(ident * 2 + (lang == "en"))
                    texts[lang][verse] = _verse_words(lang, ident, n, state)
                kept[(book, chapter, verse)] = ident
            name = f"{book} {chapter}"
            if name == "Job 1":  # Spanish: the last verse moves to Job 2:1, its place left empty
                moved, texts["es"][verses] = texts["es"][verses], ""
            if name == "Job 2":
                texts["es"] = {1: moved, **{v + 1: t for v, t in texts["es"].items() if v < verses}}
            if name == "Matthew 3":  # English: verses 5 and 6 linked, one text for both
                texts["en"][6] = texts["en"][5]
            if name == "III John 1":  # English numbers the last verse 15 where Spanish has 14 verses
                texts["es"].pop(verses)
            for lang in ("es", "en"):
                for verse, text in sorted(texts[lang].items()):
                    markup = _markup(text, lang) if text else ""
                    if book == "Psalms" and verse == 1:
                        heading = "Salmo de David." if lang == "es" else "A Psalm by David."
                        if lang == "es":
                            markup = f"{heading} OH {markup}"  # the heading inside verse 1, "OH" the first word
                        pre = f'<title canonical="true" type="psalm">{heading}</title> <lg sID="g1"/>'
                    elif book == "Psalms":
                        pre = '<title canonical="true" type="psalm">A Psalm by David.</title> <lg sID="g1"/>'  # stale
                    else:
                        pre = '<div sID="p1" type="x-p"/>' if verse == 1 else ""
                    if (book, chapter, verse) == ("Genesis", 2, 3):
                        markup += ' <title type="section">The Garden</title> <note n="a">a footnote</note> &amp; more'
                    lines[lang].append(f"{pre}{book} {chapter}:{verse}: {markup}")
            for dropped in BIBLE_DROPPED:
                if name == dropped:
                    for verse in range(1, verses + 1):
                        kept.pop((book, chapter, verse), None)
    end_of_matthew = next(i for i, line in enumerate(lines["en"]) if line.startswith("Matthew 8:12: "))
    lines["en"][end_of_matthew] += ' <div eID="b1" type="book"/> <div sID="g2" type="glossary"/> Abba is a word.'
    lines["en"].append("Tobit 1:1: <w>Deuterocanon</w>, outside the canon.")
    for lang, module in BIBLE_MODULES.items():
        (root / f"{module}.txt").parent.mkdir(parents=True, exist_ok=True)
        (root / f"{module}.txt").write_text("\n".join(lines[lang] + [f"({module})"]) + "\n", encoding="utf-8")
    return kept


def fake_diatheke(path: Path, modules: Path, listed=("spaRV1909eb", "engWEB2015eb")) -> Path:
    """An executable ``diatheke`` at ``path`` answering ``-b system -k modulelist`` with ``listed`` and
    ``-b MODULE -k ...`` with ``modules/MODULE.txt``, as the real one prints them."""
    import sys

    path.write_text(
        f"""#!{sys.executable}
import sys
args = sys.argv[1:]
module = args[args.index("-b") + 1]
if module == "system":
    print("Biblical Texts:")
    for name in {list(listed)!r}:
        print(name + " : a Bible")
    print("Commentaries:")
else:
    sys.stdout.write(open({str(modules)!r} + "/" + module + ".txt", encoding="utf-8").read())
""",
        encoding="utf-8",
    )
    path.chmod(0o755)
    return path
