"""Bible text from CrossWire SWORD modules, read with ``diatheke`` (Debian packages ``diatheke``, ``sword-text-*``).

``diatheke -b MODULE -k "Genesis 1:1 - Revelation 22:21"`` prints one entry a line, ``<Book> <chapter>:<verse>: ``
then the verse in the module's markup (OSIS ``<w>`` words with Strong's numbers, ``<transChange>`` supplied words,
``<title>`` headings, ``<l>``/``<lg>``/``<div>`` milestones). What comes before the key on a line is "pre-verse"
material (a psalm's heading, paragraph starts); diatheke 4.8 repeats the last one it saw on every later line, so
it is never read. ``verse_text`` keeps the words only.
"""

import html
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import DataError

#: the 66 books of the Protestant canon, as diatheke's English locale prints them, in order
BOOKS = (
    "Genesis",
    "Exodus",
    "Leviticus",
    "Numbers",
    "Deuteronomy",
    "Joshua",
    "Judges",
    "Ruth",
    "I Samuel",
    "II Samuel",
    "I Kings",
    "II Kings",
    "I Chronicles",
    "II Chronicles",
    "Ezra",
    "Nehemiah",
    "Esther",
    "Job",
    "Psalms",
    "Proverbs",
    "Ecclesiastes",
    "Song of Solomon",
    "Isaiah",
    "Jeremiah",
    "Lamentations",
    "Ezekiel",
    "Daniel",
    "Hosea",
    "Joel",
    "Amos",
    "Obadiah",
    "Jonah",
    "Micah",
    "Nahum",
    "Habakkuk",
    "Zephaniah",
    "Haggai",
    "Zechariah",
    "Malachi",
    "Matthew",
    "Mark",
    "Luke",
    "John",
    "Acts",
    "Romans",
    "I Corinthians",
    "II Corinthians",
    "Galatians",
    "Ephesians",
    "Philippians",
    "Colossians",
    "I Thessalonians",
    "II Thessalonians",
    "I Timothy",
    "II Timothy",
    "Titus",
    "Philemon",
    "Hebrews",
    "James",
    "I Peter",
    "II Peter",
    "I John",
    "II John",
    "III John",
    "Jude",
    "Revelation of John",
)
#: the whole canon, one diatheke key
CANON = "Genesis 1:1 - Revelation of John 22:21"
#: the entry key; a book name follows a line start, a tag or a space (longest names first: "I John" in "II John")
_KEY = re.compile(
    r"(?:^|(?<=[>\s]))(%s) (\d+):(\d+): " % "|".join(re.escape(b) for b in sorted(BOOKS, key=len, reverse=True))
)
#: where a book's last entry ends and back matter (a glossary, an introduction) begins
_BACK_MATTER = re.compile(r'<div\b[^>]*\btype="(?:book|glossary|introduction)"')
_DROPPED_ELEMENTS = re.compile(r"<(title|note)\b[^>]*(?<!/)>.*?</\1>", re.S)  # headings and footnotes, with content
# two word elements written without a space between them ("God</w><w>created"): the words are still two
_ADJACENT_WORDS = re.compile(r"(</(?:w|transChange)>)(?=<(?:w|transChange)\b)")
_TAG = re.compile(r"<[^>]*>")

Key = Tuple[str, int, int]  # (book, chapter, verse)


def parse_entries(text: str) -> Dict[Key, str]:
    """``diatheke``'s output -> (book, chapter, verse) -> the entry's markup (pre-verse material and back matter
    removed); lines without a canonical key (another book, the module-name trailer) are skipped."""
    entries: Dict[Key, str] = {}
    for line in text.splitlines():
        match = _KEY.search(line)
        if match is None:
            continue
        markup = line[match.end() :]
        end = _BACK_MATTER.search(markup)
        entries[(match[1], int(match[2]), int(match[3]))] = markup[: end.start()] if end else markup
    return entries


def verse_text(markup: str) -> str:
    """The words of one entry: headings and notes dropped, tags removed, entities decoded, spaces collapsed."""
    text = _DROPPED_ELEMENTS.sub(" ", markup)
    text = _ADJACENT_WORDS.sub(r"\1 ", text)
    text = html.unescape(_TAG.sub("", text))
    return " ".join(text.split())


def read_module(diatheke: str, module: str, key: str = CANON) -> str:
    """What ``diatheke -b module -k key`` prints (one call: a few seconds for a whole Bible)."""
    try:
        done = subprocess.run([diatheke, "-b", module, "-k", key], capture_output=True, check=True)
    except subprocess.CalledProcessError as e:
        stderr = e.stderr.decode("utf-8", "replace").strip()
        raise DataError(f"{diatheke} -b {module} failed (exit {e.returncode}): {stderr or 'no message'}") from None
    return done.stdout.decode("utf-8")


def installed_modules(diatheke: str) -> List[str]:
    """The module names ``diatheke -b system -k modulelist`` lists (``name : description`` lines)."""
    listing = subprocess.run([diatheke, "-b", "system", "-k", "modulelist"], capture_output=True, text=True).stdout
    return [line.split(" : ")[0].strip() for line in listing.splitlines() if " : " in line]


def apt_install_command(packages: Sequence[str]) -> List[str]:
    """The apt-get command that installs ``packages``, through sudo when not root."""
    command = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    return command if os.geteuid() == 0 else ["sudo", *command]


def missing_packages(diatheke: str, modules: Dict[str, str]) -> List[str]:
    """The Debian packages to install for ``diatheke`` and ``modules`` (name -> package) to be there."""
    path = shutil.which(diatheke)
    if path is None:
        return ["diatheke", *modules.values()]
    listed = installed_modules(path)
    return [package for name, package in modules.items() if name not in listed]


def ensure_modules(diatheke: str, modules: Dict[str, str], install: bool) -> str:
    """The path of ``diatheke`` once it and every module (name -> Debian package) are there, installing what is
    missing with apt-get when ``install``; a one-line error naming the fix otherwise."""
    packages = missing_packages(diatheke, modules)
    if packages:
        command = apt_install_command(packages)
        what = f"{diatheke} or its modules ({', '.join(modules)})"
        if not install:
            raise DataError(f"{what} not found: install them with `{' '.join(command)}` (or leave out --no-install)")
        if shutil.which(command[0]) is None:
            raise DataError(
                f"{what} not found, and no {command[0]} to install the Debian packages {' '.join(packages)}: "
                "install them with this system's package manager, or give --diatheke PATH"
            )
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise DataError(f"`{' '.join(command)}` failed ({last}): run it yourself, then this recipe again")
        still = missing_packages(diatheke, modules)
        if still:
            raise DataError(f"{' '.join(still)} still missing after `{' '.join(command)}`: check that installation")
    return str(shutil.which(diatheke))


def module_version(module: str) -> Optional[str]:
    """The module's ``Version=`` from its .conf in the system's or the user's SWORD library (None if not found)."""
    for folder in (Path("/usr/share/sword/mods.d"), Path.home() / ".sword" / "mods.d"):
        conf = next((c for c in (folder / f"{module}.conf", folder / f"{module.lower()}.conf") if c.is_file()), None)
        if conf is not None:
            found = re.search(r"^Version=(.+)$", conf.read_text(encoding="utf-8", errors="replace"), re.M)
            return found[1].strip() if found else None
    return None
