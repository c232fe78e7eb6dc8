"""Reading text: UTF-8 lines that name the file and line of a bad byte, progress bars, and the release
formats -- IWSLT's tagged training text and the ``<seg id="N">`` lines of IWSLT's XML and WMT's SGML test sets, read
as fairseq's recipes' ``grep``/``sed`` do, so that the prepared text has the recipe's line counts, and as sacrebleu
reads them, for the untouched references that sacreBLEU scores against.
"""

import itertools
import re
import sys
from pathlib import Path
from typing import Dict, Iterator, List

from ..errors import DataError
from ..files import atomic_outputs

# prepare-iwslt14.sh: grep -v '<url>' | grep -v '<talkid>' | grep -v '<keywords>' and
# sed -e 's/<title>//g' -e 's/<\/title>//g' -e 's/<description>//g' -e 's/<\/description>//g'
_IWSLT_DROPPED = ("<url>", "<talkid>", "<keywords>")
_IWSLT_STRIPPED = re.compile(r"</?(title|description)>")

_SEG_TAGS = re.compile(r'<seg id="[0-9]*">\s*|\s*</seg>\s*')


class _StatusLines:
    """tqdm's output as whole lines: a bar redraws its line with ``\r``, which a log file keeps as frames."""

    def write(self, text: str):
        text = text.strip("\r\n ")
        if text:
            sys.stderr.write(text + "\n")

    def flush(self):
        sys.stderr.flush()


def progress_bar(desc: str, total=None, unit="lines", quiet=False, start=0, iterable=None):
    """A tqdm bar on stderr (``unit="B"``: bytes in KiB/MiB), in place on a terminal; in a log file (CI) one line
    every 30 s at most, so logs stay short. tqdm is imported here: its import costs about 0.1 s of CPU, which
    ``--help`` does not need."""
    from tqdm import tqdm

    terminal = sys.stderr.isatty()
    return tqdm(
        iterable,
        file=sys.stderr if terminal else _StatusLines(),
        desc=desc,
        total=total,
        unit=unit if unit == "B" else f" {unit}",
        initial=start,
        disable=quiet,
        mininterval=0.5 if terminal else 30.0,
        delay=0 if terminal else 30.0,
        unit_scale=unit == "B",
        unit_divisor=1024,
        dynamic_ncols=True,
    )


def utf8_lines(path: Path) -> Iterator[str]:
    """The lines of ``path`` (with their ``\\n``; a stray ``\\r`` stays in its line), decoded as UTF-8. Python's
    own error names only a byte offset, and from a worker pool it arrives as a traceback; here a line that
    is not UTF-8 stops the run with its file and line number."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{path} line {number} is not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1}): "
                    "convert the file, e.g. iconv -f LATIN1 -t UTF-8"
                ) from None


def utf8_chunks(path: Path, size: int) -> Iterator[List[str]]:
    """The lines of ``path`` (as ``utf8_lines``) in lists of ``size``."""
    lines = utf8_lines(path)
    while chunk := list(itertools.islice(lines, size)):
        yield chunk


def iwslt_train_lines(path: Path) -> List[str]:
    """The text lines of IWSLT's ``train.tags.*``: metadata lines dropped, title/description kept."""
    lines = (line for line in utf8_lines(path) if not any(tag in line for tag in _IWSLT_DROPPED))
    return [_IWSLT_STRIPPED.sub("", line).rstrip("\n") for line in lines]


def seg_lines(path: Path) -> List[str]:
    """The contents of the ``<seg id="N">`` lines of an IWSLT XML or WMT SGML file, as fairseq's recipes read them:
    the tags and the spaces around them removed, the right single quotation mark replaced by ``'``."""
    out = [
        _SEG_TAGS.sub("", line.rstrip("\n")).replace("\u2019", "'") for line in utf8_lines(path) if "<seg id" in line
    ]
    if not out:
        raise DataError(f"{path} has no <seg id=...> lines: not an IWSLT XML / WMT SGML test set")
    return out


def aligned_seg_lines(paths: Dict[str, Path]) -> Dict[str, List[str]]:
    """``seg_lines`` of a test set's file per language, which must hold as many segments."""
    segs = {lang: seg_lines(path) for lang, path in paths.items()}
    if len({len(s) for s in segs.values()}) > 1:
        files, counts = " and ".join(map(str, paths.values())), " and ".join(str(len(s)) for s in segs.values())
        raise DataError(f"{files} have {counts} segments; they must be aligned")
    return segs


def official_seg_text(sources: List[Path], out: Path):
    """``out``: the ``<seg>`` contents of the IWSLT XML or WMT SGML files ``sources``, one after another, as
    ``sacrebleu -t`` makes its test sets' text -- with sacrebleu's own converter (tags removed, whitespace collapsed,
    nothing else: no ``’`` replaced, no tokenisation), so that the references are the official ones byte for byte."""
    from sacrebleu.dataset.fake_sgml import FakeSGMLDataset

    converter = FakeSGMLDataset("untouched")  # a name only: nothing is downloaded or written until asked
    with atomic_outputs([out]) as (tmp,), open(tmp, "w", encoding="utf-8") as g:
        part = Path(f"{tmp}.part")  # sacrebleu's converter writes a file
        try:
            for source in sources:
                converter._convert_format(str(source), str(part))
                g.write(part.read_text(encoding="utf-8"))
        finally:
            part.unlink(missing_ok=True)
