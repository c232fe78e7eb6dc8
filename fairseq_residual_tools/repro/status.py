"""A cell's training state, read from the evidence ``launch.train`` writes to ``<work>/<cell>/`` (``train.log``,
``launch.json``) -- never from what a command meant to do. The states are checked in the order of their
constants below (docs/reproduce.md, "Cell states")."""

import json
import signal
from dataclasses import dataclass
from pathlib import Path

from fairseq_residual.finished_training import NOTHING_LEFT

from ..training_log import divergence, read_log

NOT_RUN = "not run"  # no launch has started (no train.log)
RUNNING = "running or interrupted"  # the last launch has no record, or ended by a signal: the same command resumes it
FAILS = "fails"  # the last launch ended by itself and its log shows divergence (a killed one is not judged)
TRAINED = "trained"  # the last launch exited 0 after fairseq's "done training" or the plugin's NOTHING_LEFT line
FAILED = "failed"  # the last launch exited otherwise; the detail is the log's last line (usually the error)

LAUNCH_MARK = "### "
#: exit statuses of a process killed by SIGINT, SIGKILL or SIGTERM, as shells and srun report them
_SIGNALLED = {128 + s for s in (signal.SIGINT, signal.SIGKILL, signal.SIGTERM)}
_STOP_REASONS = (  # fairseq's lines, and the plugin's for a launch that found the training finished
    ("Stopping training due to num_updates", "max_update reached"),
    (f"{NOTHING_LEFT}: --max-update", "max_update reached"),
    (f"{NOTHING_LEFT}: --stop-time-hours", "stop_time_hours reached"),
    (f"{NOTHING_LEFT}: the learning rate", "stop_min_lr reached"),
    ("early stop since valid performance", "early stop (patience)"),
    ("Stopping training due to cumulative_training_time", "stop_time_hours reached"),
    ("stopping training because current learning rate", "stop_min_lr reached"),
)


@dataclass(frozen=True)
class TrainingState:
    name: str  # one of NOT_RUN, RUNNING, FAILS, TRAINED, FAILED
    detail: str = ""
    returncode: int = 0

    def describe(self) -> str:  # as the tables and errors show it
        if self.name == FAILED:
            return f"failed (exit {self.returncode})"
        if self.name == TRAINED:
            return "trained, not evaluated"
        return self.name


def launch_records(cell_dir: Path) -> list:  # launch.json: one record per launch, oldest first
    path = Path(cell_dir) / "launch.json"
    return json.loads(path.read_text()) if path.is_file() else []


def training_state(cell_dir: Path) -> TrainingState:
    log = Path(cell_dir) / "train.log"
    if not log.is_file():
        return TrainingState(NOT_RUN)
    records = launch_records(cell_dir)
    if not records or records[-1].get("returncode") is None:
        return TrainingState(RUNNING, "the last launch has not ended (or was killed with its launcher)")
    last = records[-1]
    rc = int(last["returncode"])
    if last.get("signal") or rc < 0 or rc in _SIGNALLED:
        stopped_by = last.get("signal") or (signal.Signals(-rc).name if rc < 0 else f"exit {rc}")
        return TrainingState(RUNNING, f"the last launch was stopped by {stopped_by}", rc)
    # judged on the curve of a training that ended by itself: a cut-off one has not stalled
    reason = divergence(read_log(log))
    if reason:
        return TrainingState(FAILS, reason)
    text = log.read_text(encoding="utf-8", errors="replace")
    section = text[text.rfind("\n" + LAUNCH_MARK) + 1 :]  # what the last launch wrote (all without a mark)
    if rc == 0 and ("done training" in section or NOTHING_LEFT in section):
        stop = next((why for mark, why in _STOP_REASONS if mark in section), "max_epoch reached")
        return TrainingState(TRAINED, stop)
    lines = [line.strip() for line in section.splitlines() if line.strip()]
    last_line = lines[-1] if lines else "(empty log)"
    if rc == 0:
        last_line = f"fairseq did not log 'done training'; last line: {last_line}"
    return TrainingState(FAILED, last_line, rc)
