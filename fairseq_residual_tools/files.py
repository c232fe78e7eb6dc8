"""Every file the tools write appears whole or not at all: written under a temporary name, then renamed
onto its path in one step, so a kill leaves the previous version or the new one, never half of one.
``atomic_outputs`` is the one helper; the others write text and JSON through it."""

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import List, Sequence


def _remove(path: Path):
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


@contextmanager
def atomic_outputs(paths: Sequence[Path]):
    """Yield temporary paths; rename them onto ``paths`` (replacing a folder there) only if the block succeeds."""
    tmp = [Path(f"{p}.tmp{os.getpid()}") for p in paths]
    for t in tmp:
        _remove(t)  # left by a killed run whose process id this one has again
    try:
        yield tmp
        for t, p in zip(tmp, paths):
            if Path(p).is_dir():
                shutil.rmtree(p)
            os.replace(t, p)
    finally:
        for t in tmp:
            _remove(t)


def write_text(path, text: str):
    """``path`` (a str or Path) holds ``text`` in UTF-8, written as one replacement."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_outputs([path]) as (tmp,):
        tmp.write_text(text, encoding="utf-8")


def write_lines(path: Path, lines: List[str]):
    write_text(path, "".join(line + "\n" for line in lines))


def json_text(value, sort_keys=False) -> str:
    """What ``write_json`` writes."""
    return json.dumps(value, indent=1, sort_keys=sort_keys) + "\n"


def write_json(path: Path, value, sort_keys=False):
    write_text(path, json_text(value, sort_keys))


def write_if_changed(path: Path, text: str) -> None:
    """``write_text``, leaving a file that holds the same text as it is (its time too: recipes redo every stage
    after an input whose time changed)."""
    if not (path.exists() and path.read_text(encoding="utf-8") == text):
        write_text(path, text)
