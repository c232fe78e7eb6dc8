"""Real English text that every CPython installs: the documentation topics of ``pydoc_data.topics`` (the
reference manual's sections that ``help()`` shows), as plain text for a small language-model run.

    python -m fairseq_residual_tools.dataprep.pydoc_text --out data/pydoc    # text, then the LM data-bin

Each topic (sorted by name) is cut into paragraphs at empty lines, a paragraph's lines joined by single spaces:
one paragraph a line. Paragraph j (counting over all topics) goes to valid if j mod 20 = 18, to test if
j mod 20 = 19, else to train: a fixed 90/5/5 split spread over every topic. ``record.json`` holds the Python
version (the text is that release's manual) and the sha256 of the text; the data-bin is made by the monolingual
recipe (Moses tokens, BPE, ``fairseq-preprocess --only-source``).
"""

import argparse
import hashlib
import platform
import re
from pathlib import Path
from typing import Dict, List, Mapping, Optional

from ..errors import DataError, exit_on_user_error
from ..files import json_text, write_if_changed

SPLITS = ("train", "valid", "test")
#: paragraph j's split: j mod PERIOD = VALID_AT -> valid, TEST_AT -> test, else train
PERIOD, VALID_AT, TEST_AT = 20, 18, 19


def paragraphs(topics: Mapping[str, str]) -> List[str]:
    """Every topic's paragraphs in topic-name order, each on one line."""
    out = []
    for name in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[name]):
            line = " ".join(block.split())
            if line:
                out.append(line)
    return out


def split_of(index: int) -> str:
    rest = index % PERIOD
    return "valid" if rest == VALID_AT else "test" if rest == TEST_AT else "train"


def write_text_files(folder: Path, limit: Optional[int] = None, topics: Optional[Mapping[str, str]] = None) -> Dict:
    """``folder``/{train,valid,test}.txt from the first ``limit`` paragraphs (all: None), and ``record.json``;
    returns the record."""
    if topics is None:
        from pydoc_data.topics import topics as installed

        topics = installed
    if limit is not None and limit < PERIOD:
        raise DataError(f"--paragraphs {limit} leaves a split empty: give at least {PERIOD}")
    chosen = paragraphs(topics)[:limit]
    lines: Dict[str, List[str]] = {split: [] for split in SPLITS}
    for j, line in enumerate(chosen):
        lines[split_of(j)].append(line)
    folder.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        write_if_changed(folder / f"{split}.txt", "".join(f"{line}\n" for line in lines[split]))
    text = "".join(f"{line}\n" for line in chosen).encode("utf-8")
    record = dict(
        source="pydoc_data.topics.topics (the Python reference manual's help() topics)",
        python=platform.python_version(),
        paragraphs=len(chosen),
        lines={split: len(lines[split]) for split in SPLITS},
        words=sum(len(line.split()) for line in chosen),
        sha256=hashlib.sha256(text).hexdigest(),
        split=f"paragraph j: valid if j % {PERIOD} == {VALID_AT}, test if j % {PERIOD} == {TEST_AT}, else train",
    )
    write_if_changed(folder / "record.json", json_text(record))
    return record


def prepare(out: Path, bpe_merges: int, limit: Optional[int] = None, quiet: bool = True) -> Dict:
    """The text in ``out``/raw and the data-bin in ``out``/bin (the monolingual recipe, resumable); returns the
    text's record with the data-bin's path."""
    from . import monolingual

    record = write_text_files(out / "raw", limit)
    argv = [f"--{split}={out / 'raw' / f'{split}.txt'}" for split in SPLITS]
    argv += [f"--out={out}", f"--bpe-merges={bpe_merges}", "--workers=1"] + (["--quiet"] if quiet else [])
    if monolingual.main(argv) != 0:
        raise DataError(f"preparing the pydoc text in {out} failed (its output above says why)")
    return dict(record, databin=str(out / "bin"), bpe_merges=bpe_merges)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m fairseq_residual_tools.dataprep.pydoc_text", description=__doc__.splitlines()[0]
    )
    p.add_argument("--out", required=True, help="folder: raw/ (the text), text/, bin/ (the data-bin)")
    p.add_argument("--bpe-merges", type=int, default=2000)
    p.add_argument("--paragraphs", type=int, help="the first N paragraphs only (default: all)")
    args = p.parse_args(argv)

    def run():
        record = prepare(Path(args.out), args.bpe_merges, args.paragraphs, quiet=False)
        print(f"{record['paragraphs']} paragraphs of Python {record['python']}'s manual -> {record['databin']}")

    return exit_on_user_error(run)


if __name__ == "__main__":
    raise SystemExit(main())
