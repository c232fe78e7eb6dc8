"""One run alone on both cores against two side by side: whether a run too long for one session's training (about
two and a half hours side by side) ends inside one when it trains alone with two torch threads. Measured as
pace.py measures (fairseq-train's own log, the study's settings, from scratch, updates SKIP to UPDATES, nothing
kept), in one invocation with the study paused (SIGSTOP): first Pre-LN E6D6 seed 1 and seed 2 side by side, one
thread each (the study's way: the reference), then each run of ALONE by itself with two threads.

    .venv/bin/python results/bible-study/pace_alone.py [WORK] > results/bible-study/pace_alone.md
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pace import SKIP, UPDATES, pace

from fairseq_residual_tools.analysis import bible_study
from fairseq_residual_tools.analysis.study import RunSpec
from fairseq_residual_tools.provenance import describe, provenance
from fairseq_residual_tools.runner import fairseq_command

SIDE_BY_SIDE = (RunSpec("pre", 6, True, 1), RunSpec("pre", 6, True, 2))
ALONE = (RunSpec("pre", 6, True, 1), RunSpec("residual", 6, False, 1), RunSpec("residual", 12, True, 1))


def train(specs, threads: int, args, databin: Path, scratch: Path):
    """``specs`` trained at once, ``threads`` torch threads each, at ``nice -n 5``; each one's pace."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    jobs = []
    for spec in specs:
        save = scratch / f"{spec.name}-{threads}-threads-{len(specs)}-at-once"
        save.mkdir()
        cmd = fairseq_command("train", *bible_study.training_args(databin, save, spec, args, UPDATES))
        log = open(save / "train.out", "w")
        jobs.append((spec, save, log, subprocess.Popen(["nice", "-n", "5", *cmd], stdout=log, stderr=log, env=env)))
    paces = []
    for spec, save, log, job in jobs:
        if job.wait() != 0:
            sys.exit(f"{spec.name}: fairseq-train failed (exit {job.returncode}); its log: {save / 'train.out'}")
        log.close()
        paces.append(pace(save / "train.out"))
    return paces


def main(work: Path) -> None:
    args = bible_study.parse_args(["--work", str(work)])
    databin, scratch = work / "data" / "bin", Path(tempfile.mkdtemp(prefix="bible-pace-alone-"))
    print(f"Made by `.venv/bin/python results/bible-study/pace_alone.py {work}` (see the script), with the study")
    print(f"paused; seconds per update over updates {SKIP}-{UPDATES}.\n")
    print("| run | how | s / update | x pre E6D6 side by side | updates / s, machine |")
    print("|---|---|---|---|---|")
    paces = train(SIDE_BY_SIDE, 1, args, databin, scratch)
    reference = paces[0]
    for spec, seconds in zip(SIDE_BY_SIDE, paces):
        row = f"{seconds:.2f} | {seconds / reference:.2f} | {sum(1 / p for p in paces):.2f}"
        print(f"| {spec.name} | side by side, 1 thread each | {row} |", flush=True)
    for spec in ALONE:
        (seconds,) = train([spec], 2, args, databin, scratch)
        print(f"| {spec.name} | alone, 2 threads | {seconds:.2f} | {seconds / reference:.2f} | {1 / seconds:.2f} |")
    shutil.rmtree(scratch)
    print(f"\n{describe(provenance())}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "work/bible-study"))
