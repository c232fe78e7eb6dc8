"""Markdown tables for the reports, through tabulate."""

from typing import Iterable, Sequence

from tabulate import tabulate


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub Markdown table; cells are written as given (pre-formatted numbers stay as they are)."""
    return tabulate(list(rows), headers=list(headers), tablefmt="github", disable_numparse=True)
