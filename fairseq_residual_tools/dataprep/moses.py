"""Python equivalents of the Moses scripts that fairseq's recipes call: ``normalize-punctuation.perl``
and ``tokenizer.perl [-a]`` are sacremoses (Perl parity; escaping on, as the Perl default: ``'`` -> ``&apos;``),
``remove-non-printing-char.perl`` is ``remove_non_printing``, ``lowercase.perl`` is ``str.lower`` and
``clean-corpus-n.perl`` is ``clean_corpus``. ``process_file`` runs a chain of them over a file with
``workers`` processes, in line order.
"""

import itertools
import multiprocessing
import os
import unicodedata
from contextlib import ExitStack
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Callable, Iterable, List

from ..errors import DataError
from ..files import atomic_outputs
from .formats import progress_bar, utf8_chunks, utf8_lines


def remove_non_printing(line: str) -> str:
    """``remove-non-printing-char.perl``: every character of Unicode category C* becomes a space."""
    if line.isprintable():  # fast path; isprintable() is False for every C* character
        return line
    return "".join(" " if unicodedata.category(c)[0] == "C" else c for c in line)


@dataclass(frozen=True)
class TextSteps:
    """What to do to each line, in this order."""

    lang: str
    normalize_punctuation: bool = False
    remove_non_printing: bool = False
    tokenize: bool = True
    aggressive_dash_splits: bool = False  # tokenizer.perl -a
    lowercase: bool = False


@lru_cache(maxsize=None)  # once per process: sacremoses takes a while to set up
def _processor(steps: TextSteps) -> Callable[[str], str]:
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    normalizer = MosesPunctNormalizer(lang=steps.lang, penn=False, perl_parity=True)
    tokenizer = MosesTokenizer(lang=steps.lang)

    def process(line: str) -> str:
        line = line.rstrip("\n")
        if steps.normalize_punctuation:
            line = normalizer.normalize(line)
        if steps.remove_non_printing:
            line = remove_non_printing(line)
        if steps.tokenize:
            # escape=True: tokenizer.perl escapes unless -no-escape, and fairseq's recipes keep that
            line = tokenizer.tokenize(
                line, aggressive_dash_splits=steps.aggressive_dash_splits, escape=True, return_str=True
            )
        if steps.lowercase:
            line = line.lower()
        return line

    return process


def process_lines(steps: TextSteps, lines: List[str]) -> List[str]:
    """Apply ``steps`` to ``lines`` in this process."""
    return list(map(_processor(steps), lines))


def process_file(steps: TextSteps, inp: Path, out: Path, workers=1, quiet=False):
    """Write ``steps`` applied to every line of ``inp`` to ``out`` (atomically)."""
    process = partial(process_lines, steps)
    chunks = utf8_chunks(inp, 2000)
    progress = progress_bar(Path(out).name, quiet=quiet)
    with progress, atomic_outputs([out]) as (tmp,), open(tmp, "w", encoding="utf-8") as g, ExitStack() as stack:
        results: Iterable[List[str]]
        if workers > 1:
            ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
            results = stack.enter_context(ctx.Pool(workers)).imap(process, chunks)
        else:
            results = map(process, chunks)
        for result in results:
            g.write("\n".join(result) + "\n")
            progress.update(len(result))


def clean_corpus(prefix_in: str, l1: str, l2: str, prefix_out: str, min_len: int, max_len: int, ratio: float) -> int:
    """``clean-corpus-n.perl -ratio R prefix_in l1 l2 prefix_out min max``: keeps a pair when both sides have
    ``min..max`` tokens, neither side is more than ``ratio`` times longer than the other, and no token exceeds 1000
    characters; whitespace is normalised and, as in the Perl script, ``|`` is removed unless the first line looked
    factored. Returns the pairs kept."""
    files_in = [Path(f"{prefix_in}.{l}") for l in (l1, l2)]
    files_out = [Path(f"{prefix_out}.{l}") for l in (l1, l2)]
    kept = 0
    f1, f2 = utf8_lines(files_in[0]), utf8_lines(files_in[1])
    with (
        atomic_outputs(files_out) as tmp,
        open(tmp[0], "w", encoding="utf-8") as o1,
        open(tmp[1], "w", encoding="utf-8") as o2,
    ):
        factored = None
        for n, (a, b) in enumerate(itertools.zip_longest(f1, f2), start=1):
            if a is None or b is None:
                short = files_in[0] if a is None else files_in[1]
                raise DataError(f"line counts differ: {short} ends at line {n - 1}, the other side continues")
            a, b = a.rstrip("\n"), b.rstrip("\n")
            if factored is None:
                factored = "|" in a or "|" in b
            if not factored:
                a, b = a.replace("|", ""), b.replace("|", "")
            a, b = " ".join(a.split()), " ".join(b.split())
            if not a or not b:
                continue
            ta, tb = a.split(" "), b.split(" ")
            na, nb = len(ta), len(tb)
            if not (min_len <= na <= max_len and min_len <= nb <= max_len):
                continue
            if na / nb > ratio or nb / na > ratio:
                continue
            if max(map(len, ta)) > 1000 or max(map(len, tb)) > 1000:
                continue
            o1.write(a + "\n")
            o2.write(b + "\n")
            kept += 1
    return kept
