"""Markdown for the reports: tables through tabulate, and blocks a tool writes into a page between two markers."""

from pathlib import Path
from typing import Iterable, Sequence, Tuple

from tabulate import tabulate


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub Markdown table; cells are written as given (pre-formatted numbers stay as they are)."""
    return tabulate(list(rows), headers=list(headers), tablefmt="github", disable_numparse=True)


def _split(page: Path, start: str, end: str) -> Tuple[str, str, str]:
    """``page``'s text before its block (between the lines ``start`` and ``end``), the block, and after."""
    before, rest = Path(page).read_text(encoding="utf-8").split(start + "\n", 1)
    block, after = rest.split("\n" + end, 1)
    return before, block, after


def block_of(page: Path, start: str, end: str) -> str:
    """The block of ``page`` between the marker lines ``start`` and ``end``, as it stands."""
    return _split(page, start, end)[1]


def write_block(page: Path, start: str, end: str, text: str) -> None:
    """Replace the block of ``page`` between the marker lines ``start`` and ``end`` with ``text``."""
    from .files import write_text

    before, _, after = _split(page, start, end)
    write_text(page, f"{before}{start}\n{text}\n{end}{after}")
