"""Seconds per update of a study's models under its recipe, measured by fairseq-train itself: the figures an envelope
is projected from before the runs start.

    python -m fairseq_residual_tools.analysis.pace --pairs pre:18 residual:18 dlcl:18 admin:18 \\
        --updates 60 --skip 20 -- --work work/bible-study --criterion fused

Each pair of runs (SCHEME:DEPTH, taken two by two) trains side by side, one torch thread each, at ``nice -n 5`` (as
the study trains them), from scratch for ``--updates`` updates on the study's data-bin (``WORK/data/bin``), with the
study's settings (``bible_study.training_args``; the options after ``--`` are the study's); the pace is the wall
time between fairseq's log lines at updates ``--skip`` and ``--updates`` (the first ones hold the start-up and the
allocator's first steps), over the updates between. Nothing is validated or kept. Run it with the study paused
(SIGSTOP): it measures the machine's two cores. The Markdown table goes to standard output; ``--json FILE`` also
writes each run's seconds per update there (what an envelope is projected from).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import ConfigError, exit_on_user_error
from ..files import write_json
from ..provenance import describe, provenance
from ..runner import fairseq_command
from . import bible_study
from .study import RunSpec


def stamps(log: Path) -> Dict[int, datetime]:
    """update -> time of each fairseq train_inner line."""
    found = {}
    for line in log.read_text().splitlines():
        if "train_inner" in line:
            record = json.loads(line[line.index("{") :])
            found[int(record["num_updates"])] = datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
    return found


def pace(log: Path, skip: int, updates: int) -> float:
    at = stamps(log)
    return (at[updates] - at[skip]).total_seconds() / (updates - skip)


def measure(
    pairs: Sequence[Tuple[RunSpec, RunSpec]],
    study,
    skip: int,
    updates: int,
    command: str,
    first: str = "first run",
    paces: Optional[Dict[str, float]] = None,
) -> List[str]:
    """Train each pair side by side; the table's lines, the first run of the first pair (``first``) the reference;
    each run's seconds per update also into ``paces`` (by run name) when given."""
    databin = Path(study.work) / "data" / "bin"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    scratch = Path(tempfile.mkdtemp(prefix="study-pace-"))
    lines = [f"Made by `{command}` (see the script).", ""]
    lines += [f"| pair | run | s / update | x {first} |", "|---|---|---|---|"]
    reference = None
    for number, pair in enumerate(pairs, 1):
        jobs = []
        for spec in pair:
            save = scratch / spec.name
            save.mkdir()
            cmd = fairseq_command("train", *bible_study.training_args(databin, save, spec, study, updates))
            log = open(save / "train.out", "w")
            jobs.append((spec, save, log, subprocess.Popen(["nice", "-n", "5", *cmd], stdout=log, stderr=log, env=env)))
        for spec, save, log, job in jobs:
            if job.wait() != 0:
                sys.exit(f"{spec.name}: fairseq-train failed (exit {job.returncode}); its log: {save / 'train.out'}")
            log.close()
            seconds = pace(save / "train.out", skip, updates)
            reference = reference or seconds
            if paces is not None:
                paces[spec.name] = round(seconds, 3)
            lines.append(f"| {number} | {spec.name} | {seconds:.2f} | {seconds / reference:.2f} |")
            print(lines[-1], file=sys.stderr, flush=True)
    shutil.rmtree(scratch)
    return lines + ["", describe(provenance())]


def run_spec(text: str) -> RunSpec:
    scheme, _, depth = text.rpartition(":")
    if not scheme or not depth.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: write SCHEME:DEPTH, e.g. residual:18")
    return RunSpec(scheme, int(depth), True, 1)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    ours, rest = argv[:split], argv[split + 1 :]
    p = argparse.ArgumentParser(prog="fairseq-residual-pace", description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=run_spec, nargs="+", required=True, help="SCHEME:DEPTH ..., two by two")
    p.add_argument("--updates", type=int, default=150)
    p.add_argument("--skip", type=int, default=50)
    p.add_argument("--json", type=Path, help="also write {run name: seconds per update} here")
    args = p.parse_args(ours)
    if len(args.pairs) % 2 or not 0 < args.skip < args.updates:
        raise ConfigError("--pairs takes runs two by two, and --skip must lie between 0 and --updates")
    study = bible_study.parse_args(rest)
    pairs = list(zip(args.pairs[::2], args.pairs[1::2]))
    command = " ".join(["python -m fairseq_residual_tools.analysis.pace", *argv])
    paces: Dict[str, float] = {}
    print("\n".join(measure(pairs, study, args.skip, args.updates, command, paces=paces)))
    if args.json:
        write_json(args.json, {"command": command, "seconds_per_update": paces, "provenance": provenance()})
    return 0


if __name__ == "__main__":
    raise SystemExit(exit_on_user_error(main))
