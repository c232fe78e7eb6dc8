"""Readers for the release formats: IWSLT's tagged training text and the
``<seg id="N">`` lines of IWSLT's XML and WMT's SGML test sets.

Both follow fairseq's recipes line for line (``grep``/``sed`` there), so that
the prepared text has the recipe's line counts.
"""

import re
from pathlib import Path
from typing import List

from ..errors import DataError

# prepare-iwslt14.sh: grep -v '<url>' | grep -v '<talkid>' | grep -v '<keywords>' and
# sed -e 's/<title>//g' -e 's/<\/title>//g' -e 's/<description>//g' -e 's/<\/description>//g'
_IWSLT_DROPPED = ("<url>", "<talkid>", "<keywords>")
_IWSLT_STRIPPED = ("<title>", "</title>", "<description>", "</description>")

_SEG_OPEN = re.compile(r'<seg id="[0-9]*">\s*')
_SEG_CLOSE = re.compile(r"\s*</seg>\s*")


def iwslt_train_lines(path: Path) -> List[str]:
    """The text lines of IWSLT's ``train.tags.*``: metadata lines dropped, title/description kept."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if any(tag in line for tag in _IWSLT_DROPPED):
                continue
            for tag in _IWSLT_STRIPPED:
                line = line.replace(tag, "")
            out.append(line.rstrip("\n"))
    return out


def seg_lines(path: Path) -> List[str]:
    """The contents of the ``<seg id="N">`` lines of an IWSLT XML or WMT SGML file.

    As fairseq's recipes: lines without ``<seg id`` are skipped, the tags and the
    spaces around them removed, and the right single quotation mark replaced by ``'``.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"missing file {path}")
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if "<seg id" not in line:
                continue
            line = _SEG_OPEN.sub("", line.rstrip("\n"))
            line = _SEG_CLOSE.sub("", line)
            out.append(line.replace("\u2019", "'"))
    if not out:
        raise DataError(f"{path} has no <seg id=...> lines: not an IWSLT XML / WMT SGML test set")
    return out


def write_lines(path: Path, lines: List[str]):
    from .pipeline import atomic_outputs

    with atomic_outputs([Path(path)]) as (tmp,), open(tmp, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)
