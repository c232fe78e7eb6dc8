"""Seconds per update of the plan's models under the study's recipe, measured by fairseq-train itself: the
envelope's figures for the runs that have not trained yet. Each pair of runs in PAIRS trains side by side, one torch
thread each, at `nice -n 5` (as the study trains them), from scratch for UPDATES updates on the study's data-bin in
WORK/data/bin, with the study's default settings (`bible_study.training_args`); the pace is the wall time between
fairseq's log lines at updates SKIP and UPDATES (the first SKIP updates hold the start-up and the allocator's first
steps), over the updates between. Nothing is validated or kept. Run it with the study paused (SIGSTOP): it measures
the machine's two cores.

    .venv/bin/python results/bible-study/pace.py [WORK] > results/bible-study/pace.md
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from fairseq_residual_tools.analysis import bible_study
from fairseq_residual_tools.analysis.study import RunSpec
from fairseq_residual_tools.provenance import describe, provenance
from fairseq_residual_tools.runner import fairseq_command

UPDATES, SKIP = 150, 50
PAIRS = [
    (RunSpec("pre", 6, True, 1), RunSpec("hc", 6, True, 1)),
    (RunSpec("siamese", 6, True, 1), RunSpec("attn-res", 6, True, 1)),
    (RunSpec("pre", 12, True, 1), RunSpec("residual", 12, True, 1)),
]


def stamps(log: Path):
    """(update, time) of each fairseq train_inner line."""
    found = []
    for line in log.read_text().splitlines():
        if "train_inner" in line:
            record = json.loads(line[line.index("{") :])
            found.append((int(record["num_updates"]), datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S")))
    return dict(found)


def pace(log: Path) -> float:
    at = stamps(log)
    return (at[UPDATES] - at[SKIP]).total_seconds() / (UPDATES - SKIP)


def main(work: Path) -> None:
    args = bible_study.parse_args(["--work", str(work)])
    databin = work / "data" / "bin"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    scratch = Path(tempfile.mkdtemp(prefix="bible-pace-"))
    print(f"Made by `.venv/bin/python results/bible-study/pace.py {work}` (see the script).\n")
    print("| pair | run | s / update | x pre E6D6 |")
    print("|---|---|---|---|")
    reference = None
    for number, pair in enumerate(PAIRS, 1):
        jobs = []
        for spec in pair:
            save = scratch / spec.name
            save.mkdir()
            cmd = fairseq_command("train", *bible_study.training_args(databin, save, spec, args, UPDATES))
            log = open(save / "train.out", "w")
            jobs.append((spec, save, log, subprocess.Popen(["nice", "-n", "5", *cmd], stdout=log, stderr=log, env=env)))
        for spec, save, log, job in jobs:
            if job.wait() != 0:
                sys.exit(f"{spec.name}: fairseq-train failed (exit {job.returncode}); its log: {save / 'train.out'}")
            log.close()
            seconds = pace(save / "train.out")
            reference = reference or seconds  # the first run of the first pair: pre E6D6
            print(f"| {number} | {spec.name} | {seconds:.2f} | {seconds / reference:.2f} |", flush=True)
    shutil.rmtree(scratch)
    print(f"\n{describe(provenance())}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "work/bible-study"))
