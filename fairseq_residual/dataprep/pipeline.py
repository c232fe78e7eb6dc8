"""The shared tokenise -> subword -> binarise pipeline.

Every stage writes its outputs under temporary names and renames them when
complete, so an interrupted run never leaves a file that looks finished; a
re-run skips stages whose outputs exist (``force=True`` redoes them).
"""
import logging
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterable, List, Sequence

from ..errors import DataError

logger = logging.getLogger(__name__)


@contextmanager
def atomic_outputs(paths: Sequence[Path]):
    """Yield temporary paths; rename them onto ``paths`` only if the block succeeds."""
    tmp = [Path(f"{p}.tmp{os.getpid()}") for p in paths]
    try:
        yield tmp
        for t, p in zip(tmp, paths):
            os.replace(t, p)
    finally:
        for t in tmp:
            if t.exists():
                t.unlink()


def stage_done(outputs: Iterable[Path], force: bool) -> bool:
    return not force and all(Path(p).exists() for p in outputs)


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def check_parallel(prefix: str, src: str, tgt: str) -> int:
    """Both sides exist, are non-empty and have the same number of lines."""
    counts = {}
    for lang in (src, tgt):
        path = Path(f"{prefix}.{lang}")
        if not path.is_file():
            raise DataError(f"missing file {path}: expected parallel text {prefix}.{{{src},{tgt}}}")
        counts[lang] = count_lines(path)
        if counts[lang] == 0:
            raise DataError(f"empty corpus: {path} has no lines")
    if counts[src] != counts[tgt]:
        raise DataError(
            f"line counts differ: {prefix}.{src} has {counts[src]} lines, "
            f"{prefix}.{tgt} has {counts[tgt]}; the two sides must be aligned line by line"
        )
    return counts[src]


def moses_tokenize(inp: Path, out: Path, lang: str, lowercase=False, force=False):
    """Moses tokenisation (sacremoses), escaping off as fairseq's recipes use it."""
    if stage_done([out], force):
        return
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang)
    with atomic_outputs([out]) as (tmp,), open(inp, encoding="utf-8") as f, open(
        tmp, "w", encoding="utf-8"
    ) as g:
        for line in f:
            line = tok.tokenize(line.strip(), escape=False, return_str=True)
            g.write((line.lower() if lowercase else line) + "\n")


def learn_joint_bpe(inputs: List[Path], codes: Path, merges: int, force=False):
    """Joint BPE (subword-nmt) learned on the concatenation of ``inputs``."""
    if stage_done([codes], force):
        return
    from subword_nmt.learn_bpe import learn_bpe

    def lines():
        for p in inputs:
            with open(p, encoding="utf-8") as f:
                yield from f

    with atomic_outputs([codes]) as (tmp,), open(tmp, "w", encoding="utf-8") as g:
        learn_bpe(lines(), g, merges, min_frequency=2, total_symbols=False)


def apply_bpe(codes: Path, inp: Path, out: Path, force=False):
    if stage_done([out], force):
        return
    from subword_nmt.apply_bpe import BPE

    with open(codes, encoding="utf-8") as c:
        bpe = BPE(c)
    with atomic_outputs([out]) as (tmp,), open(inp, encoding="utf-8") as f, open(
        tmp, "w", encoding="utf-8"
    ) as g:
        for line in f:
            g.write(bpe.process_line(line))


def fairseq_preprocess(
    prefixes: Dict[str, str], src: str, tgt: str, destdir: Path, joined=True, workers=1, force=False
):
    """Binarise with ``fairseq-preprocess``; ``destdir`` appears only when complete."""
    destdir = Path(destdir)
    if stage_done([destdir / "preprocess.done"], force):
        return destdir
    tmp = Path(f"{destdir}.tmp{os.getpid()}")
    cmd = [
        sys.executable, "-m", "fairseq_cli.preprocess",
        "--source-lang", src, "--target-lang", tgt,
        "--destdir", str(tmp), "--workers", str(workers),
    ]  # fmt: skip
    for split in ("train", "valid", "test"):
        if split in prefixes:
            cmd += [f"--{split}pref", prefixes[split]]
    if joined:
        cmd.append("--joined-dictionary")
    logger.info("binarising: %s", " ".join(cmd))
    subprocess.run(cmd, check=True)
    (tmp / "preprocess.done").write_text(" ".join(cmd) + "\n")
    if destdir.exists():
        import shutil

        shutil.rmtree(destdir)
    os.replace(tmp, destdir)
    return destdir
