"""SIGKILL a fairseq training again and again, many times inside a checkpoint save, and check the result.

Each start of one ``fairseq-train`` command (a save after every update) is killed at a random moment
of its 1st or 2nd save (0 to the uninterrupted run's median save time after its "Saving checkpoint to"
log line, so that kills span the whole save on any machine and checkpoint size) or at a random moment
(starting, loading, training, validating; at the latest when its 2nd save begins). After each kill every
``checkpoint*.pt`` must load in full and the next start must resume from the update count in
``checkpoint_last.pt`` (and remove the killed save's ``.tmp`` files). With ``--epoch-ends N``, starts are
also killed inside the saves of the updates at and next to the first N epoch ends of the uninterrupted run
(its last update of each epoch, the one before and the first of the next epoch). The last start runs to
``--max-update`` and is SIGKILLed right after its final save, before it can exit; the finished command is then run
twice more, and each must say that nothing is left to do, train no update and leave every file's bytes and
modification time as they were. The parameters, optimizer state and update count must then be bit-identical to
those of an uninterrupted run. With ``--max-epoch E`` both trainings then go on with ``--max-epoch E`` instead of
``--max-update`` to the end of epoch E, where the kill after the final save, the two re-runs and the comparison are
repeated.

To make many kills affordable, each start is a fork of this process with fairseq and the plugin
already imported (``fairseq_cli.train.cli_main`` with the command's arguments, one torch thread),
instead of a fresh interpreter that spends ~4 s importing fairseq: the SIGKILL and everything the
training writes are real. The reference run is started the same way.

    python -m fairseq_residual_tools.kill_stress --work /tmp/kill-stress --kills 50 --size large
"""

import argparse
import functools
import hashlib
import json
import logging
import math
import os
import random
import re
import shutil
import signal
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Optional

import torch

from fairseq_residual.finished_training import NOTHING_LEFT

from .files import write_text
from .runner import PLUGIN_DIR

#: (layers, width, FFN width, heads, max tokens): ``large`` is the issue's 2-layer width-256 model (45 MB
#: checkpoints with Adam's state on the demo corpus, 26 updates per epoch), ``small`` the make-test one (~3 MB,
#: 57 updates per epoch; its test passes ``max_tokens=1024``, 26 per epoch, to cross several epoch ends)
SIZES = {"small": (2, 64, 128, 2, 512), "large": (2, 256, 1024, 4, 1024)}

#: the share of kills at a random moment
ANYTIME_SHARE = 0.25
SAVING = "Saving checkpoint to"
SAVED = "Saved checkpoint"
_EPOCH_END = re.compile(r"\| train \| epoch (\d+) \|.*?\| num_updates (\d+) \|")  # an epoch's summary line
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", re.M)  # the logging.Formatter's asctime


#: runs of a finished command after the kill that followed its final save
RERUNS = 2


def train_command(databin, save_dir, size, max_update, seed=1, max_tokens=None, max_epoch=None):
    """The trained command; with ``max_epoch``, it stops at that epoch's end instead of at ``max_update``."""
    layers, width, ffn, heads, size_max_tokens = SIZES[size]
    max_tokens = max_tokens or size_max_tokens
    model = []
    for side in ("encoder", "decoder"):
        model += [f"--{side}-layers", layers, f"--{side}-embed-dim", width]
        model += [f"--{side}-ffn-embed-dim", ffn, f"--{side}-attention-heads", heads]
    argv = [
        *(databin, "--user-dir", PLUGIN_DIR, "--arch", "residual_transformer", *model),
        *("--share-all-embeddings", "--dropout", "0.1", "--optimizer", "adam", "--lr", "1e-3"),
        *("--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"),
        *("--max-tokens", max_tokens, "--cpu", "--num-workers", "0"),
        *(("--max-epoch", max_epoch, "--max-update", 0) if max_epoch else ("--max-update", max_update)),
        *("--save-dir", save_dir, "--save-interval-updates", "1", "--keep-interval-updates", "3"),
        *("--keep-last-epochs", "2", "--log-format", "simple", "--log-interval", "1", "--seed", seed),
    ]
    return list(map(str, argv))


def start_training(argv, log_path, in_child: Optional[Callable[[], None]] = None) -> int:
    """Fork a ``fairseq-train argv`` whose output goes to ``log_path``; returns its pid.

    ``in_child`` runs in the child before training (tests use it to plant a failure).
    """
    Path(log_path).touch()  # exists when this returns: the caller reads it while the child starts
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = sys.stderr = os.fdopen(1, "w", buffering=1)
        log_format = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"
        logging.basicConfig(stream=sys.stdout, format=log_format, level=logging.INFO, force=True)
        from fairseq_cli import train

        torch.set_num_threads(1)  # one thread: no OpenMP pool inherited across the fork, same maths every start
        if in_child is not None:
            in_child()

        sys.argv = ["fairseq-train", *argv]
        train.cli_main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        os._exit(code)


def die_after_the_save_of(update: int) -> None:
    """In a training process (``start_training``'s ``in_child``): SIGKILL it right after the save of ``update``
    is complete, before it can log its end or exit (a kill after the final save, made certain)."""
    from fairseq import checkpoint_utils

    save_checkpoint = checkpoint_utils.save_checkpoint

    @functools.wraps(save_checkpoint)
    def save_then_die(cfg, trainer, epoch_itr, val_loss):
        saved = save_checkpoint(cfg, trainer, epoch_itr, val_loss)
        if trainer.get_num_updates() == update:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return saved

    checkpoint_utils.save_checkpoint = save_then_die


def wait_or_kill(pid, log_path, offset, saves_before_kill=None, delay=0.0, kill_at=math.inf, after_update=None):
    """Watch one start; SIGKILL it ``delay`` s after its n-th save began (counted from the log line of update
    ``after_update``, if given: n=1 is that update's save) or at ``kill_at`` (monotonic), whichever comes first.

    Returns (killed, exit status, this start's log text).
    """
    saves = _SaveCounter(log_path, offset, after_update) if saves_before_kill is not None else None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return False, os.waitstatus_to_exitcode(status), _read(log_path, offset)
        if saves is not None and saves.count() >= saves_before_kill:
            kill_at = min(kill_at, time.monotonic() + delay)
            saves = None
        if time.monotonic() >= kill_at:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return True, -signal.SIGKILL, _read(log_path, offset)
        time.sleep(0.001)


class _SaveCounter:
    """The saves a start has begun so far (its ``SAVING`` lines, after the line of update ``after_update`` if
    given), reading only what the log gained since the last look, whole lines only: the watch looks every
    millisecond, and reading the whole log each time kept a core busy for the length of a training."""

    def __init__(self, log_path, offset, after_update=None):
        self.log = open(log_path, "rb")  # closed with the counter
        self.log.seek(offset)
        self.partial = b""
        self.mark = None if after_update is None else re.compile(rf"num_updates={after_update}\b")
        self.saves = 0

    def count(self) -> int:
        lines, _, self.partial = (self.partial + self.log.read()).rpartition(b"\n")
        text = lines.decode("utf-8", errors="replace")
        if self.mark is not None:
            found = self.mark.search(text)
            if found is None:
                return 0
            text, self.mark = text[found.end() :], None
        self.saves += text.count(SAVING)
        return self.saves

    def __del__(self):
        self.log.close()


def _read(path, offset):
    with open(path, encoding="utf-8", errors="replace") as f:
        f.seek(offset)
        return f.read()


def unreadable_checkpoints(save_dir):
    """The ``checkpoint*.pt`` files that torch cannot load in full."""
    bad = []
    for path in sorted(Path(save_dir).glob("checkpoint*.pt")):
        try:
            torch.load(path, map_location="cpu")
        except Exception as e:
            bad.append(f"{path.name}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    return bad


def last_updates(save_dir) -> Optional[int]:
    """The update count in ``checkpoint_last.pt``: None if there is none, -1 if it cannot be read."""
    path = Path(save_dir) / "checkpoint_last.pt"
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location="cpu", mmap=True)["optimizer_history"][-1]["num_updates"]
    except Exception:
        return -1  # unreadable (already counted as corrupt): no start can resume from it


@dataclass
class StressReport:
    kills: int = 0
    kills_inside_a_save: int = 0
    epoch_ends: list = field(default_factory=list)  # the uninterrupted run's last update of each epoch checked
    kills_next_to_epoch_ends: list = field(default_factory=list)  # the updates whose save was killed
    kills_at_random_moments: int = 0
    save_seconds: float = 0.0  # the uninterrupted run's median save: kills inside a save land 0 to this after it began
    starts: int = 0
    resumes_checked: int = 0
    failed_resumes: list = field(default_factory=list)
    corrupt_files: list = field(default_factory=list)
    kills_that_left_temporary_files: int = 0
    starts_that_removed_temporary_files: int = 0
    temporary_files_not_removed: list = field(default_factory=list)
    kills_after_the_final_save: int = 0
    reruns_of_a_finished_training: int = 0
    reruns_that_trained_or_wrote: list = field(default_factory=list)
    ends: list = field(default_factory=list)  # per budget ("--max-update 90"): the comparison with the reference
    final_updates: Optional[int] = None  # the last end's comparison (as in ``ends``)
    reference_updates: Optional[int] = None
    parameters_identical: Optional[bool] = None
    optimizer_state_identical: Optional[bool] = None
    max_abs_parameter_difference: Optional[float] = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return (
            not self.failed_resumes
            and not self.corrupt_files
            and not self.temporary_files_not_removed
            and not self.reruns_that_trained_or_wrote
            and self.kills_after_the_final_save == len(self.ends) > 0
            and all(
                end["final_updates"] == end["reference_updates"]
                and end["parameters_identical"]
                and end["optimizer_state_identical"]
                for end in self.ends
            )
        )


def _check_resume(report, log, expected_updates, temporary_files):
    """A start that got as far as training must have loaded ``expected_updates`` (None: a fresh start),
    and first removed the ``temporary_files`` (a count) that earlier kills left."""
    loaded = re.search(r"Loaded checkpoint \S*checkpoint_last\.pt \(epoch \d+ @ (\d+) updates\)", log)
    started_training = "begin training" in log or "| epoch " in log
    if loaded is None and not started_training:
        return  # killed before the checkpoint was loaded: nothing to judge
    report.resumes_checked += 1
    got = int(loaded.group(1)) if loaded else None
    if got != expected_updates:
        report.failed_resumes.append(f"start {report.starts}: expected {expected_updates} updates, loaded {got}")
    if temporary_files:
        removed = re.search(r"removed (\d+) temporary file", log)
        if removed and int(removed.group(1)) == temporary_files:
            report.starts_that_removed_temporary_files += 1
        else:
            report.temporary_files_not_removed.append(f"start {report.starts}: {temporary_files} found")


def run_stress(
    databin, work, kills=20, size="small", max_update=None, seed=1, epoch_ends=0, max_tokens=None, max_epoch=None
):
    """Kill ``kills`` starts of one training, and the saves at and next to its first ``epoch_ends`` epoch ends,
    finish it (killed after its final save, then re-run), compare with an uninterrupted run; with ``max_epoch``,
    go on to that epoch's end in both, and finish and compare there too."""
    import fairseq_residual  # noqa: F401  (the plugin as --user-dir loads it: imported once, before the forks)

    begin = time.monotonic()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the checks in this process stay off OpenMP, so that forking it is safe
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    max_update = max_update or 2 * kills + 10
    rng = random.Random(seed)
    report = StressReport()
    reference, reference_log = work / "reference", work / "reference.log"
    killed, log_path = work / "killed", work / "killed.log"
    command = functools.partial(train_command, databin, size=size, max_update=max_update, max_tokens=max_tokens)
    try:
        _fresh(reference, reference_log)
        log = _run_reference(command(reference), reference_log)
        first_save = _seconds_to_first_save(log)
        report.save_seconds = _median_save_seconds(log)
        report.epoch_ends = [int(u) for _, u in _EPOCH_END.findall(log) if int(u) + 1 < max_update][:epoch_ends]
        if len(report.epoch_ends) < epoch_ends:
            raise ValueError(f"{max_update} updates end only {len(report.epoch_ends)} epochs before the last update")
        targets = sorted({u + d for u in report.epoch_ends for d in (-1, 0, 1)})

        _fresh(killed, log_path)
        argv = command(killed)
        other_kills = 0
        while True:
            expected, leftovers = last_updates(killed), len(list(killed.glob("*.tmp")))
            targets = [t for t in targets if t > (expected or 0)]
            # a start killed after its 1st or 2nd save stays before the next epoch-end target
            room = not targets or (expected or 0) + 2 < targets[0]
            target, at_random = None, False
            if other_kills < kills and room:
                at_random = rng.random() < ANYTIME_SHARE
                if at_random:
                    # at the latest when the 2nd save begins: a late random moment in a fast start would otherwise
                    # train many updates, and the run could end before it has had its kills
                    schedule = {"kill_at": time.monotonic() + rng.uniform(0, 1.5 * first_save), "saves_before_kill": 2}
                else:
                    schedule = {"saves_before_kill": rng.randint(1, 2), "delay": rng.uniform(0, report.save_seconds)}
            elif targets:
                target = targets[0]
                schedule = {
                    "after_update": target,
                    "saves_before_kill": 1,
                    "delay": rng.uniform(0, report.save_seconds),
                }
            else:
                break  # the start that runs to the end is _finish's
            offset = log_path.stat().st_size
            report.starts += 1
            is_killed, code, log = wait_or_kill(start_training(argv, log_path), log_path, offset, **schedule)
            _check_resume(report, log, expected, leftovers)
            if not is_killed:
                report.failed_resumes.append(f"start {report.starts} ended before its kill ({code}): {log[-300:]}")
                break
            report.kills += 1
            if target is None:
                other_kills += 1
            else:  # once: a kill inside a slow save keeps the update before, and would be repeated forever
                report.kills_next_to_epoch_ends.append(target)
                targets.remove(target)
            report.kills_inside_a_save += int(log.rfind(SAVING) > log.rfind(SAVED))
            report.kills_at_random_moments += int(at_random)
            report.corrupt_files += [f"after kill {report.kills}: {bad}" for bad in unreadable_checkpoints(killed)]
            report.kills_that_left_temporary_files += int(any(killed.glob("*.tmp")))
        _finish(report, argv, log_path, reference, f"--max-update {max_update}")
        if max_epoch:
            _run_reference(command(reference, max_epoch=max_epoch), reference_log)
            _finish(report, command(killed, max_epoch=max_epoch), log_path, reference, f"--max-epoch {max_epoch}")
    finally:
        torch.set_num_threads(threads)

    report.temporary_files_not_removed += [f"after the final run: {p.name}" for p in killed.glob("*.tmp")]
    for key, value in report.ends[-1].items():
        if key != "budget":
            setattr(report, key, value)
    report.seconds = round(time.monotonic() - begin, 1)
    return report


def _run_reference(argv, log_path) -> str:
    """The uninterrupted run (or its continuation to another budget); its log text."""
    _, code, log = wait_or_kill(start_training(argv, log_path), log_path, Path(log_path).stat().st_size)
    if code != 0:
        raise RuntimeError(f"the uninterrupted run failed ({code}):\n{log[-3000:]}")
    return log


def _finish(report, argv, log_path, reference, budget):
    """The start that reaches the ``reference`` run's last update, SIGKILLed right after that save; then ``RERUNS``
    runs of the finished command, each of which must train nothing and change no file; then the comparison."""
    save_dir = Path(argv[argv.index("--save-dir") + 1])
    update = int(last_updates(reference) or 0)  # the reference run ended: it has a checkpoint_last.pt
    expected, leftovers = last_updates(save_dir), len(list(save_dir.glob("*.tmp")))
    offset = log_path.stat().st_size
    report.starts += 1
    pid = start_training(argv, log_path, in_child=functools.partial(die_after_the_save_of, update))
    _, code, log = wait_or_kill(pid, log_path, offset)
    _check_resume(report, log, expected, leftovers)
    if code == -signal.SIGKILL and last_updates(save_dir) == update:
        report.kills_after_the_final_save += 1
    else:
        report.failed_resumes.append(f"start {report.starts} ({budget}) did not reach update {update}: {log[-300:]}")
    before = file_states(save_dir)
    for rerun in range(1, RERUNS + 1):
        offset = log_path.stat().st_size
        report.starts += 1
        _, code, log = wait_or_kill(start_training(argv, log_path), log_path, offset)
        _check_resume(report, log, update, 0)
        report.reruns_of_a_finished_training += 1
        changed = sorted(set(file_states(save_dir).items()) ^ set(before.items()))
        problems = [
            *([f"exit status {code}"] if code != 0 else []),
            *([f"{log.count(NOTHING_LEFT)} lines say '{NOTHING_LEFT}'"] if log.count(NOTHING_LEFT) != 1 else []),
            # the line names the saved state it read (fairseq's "Loaded checkpoint" line is hidden in such a re-run)
            *([f"its line does not say '({update} updates)'"] if f"({update} updates)" not in log else []),
            *(["it trained"] if "num_updates=" in log else []),
            *([f"files changed: {', '.join(sorted({name for name, _ in changed}))}"] if changed else []),
        ]
        report.reruns_that_trained_or_wrote += [f"re-run {rerun} after {budget}: {p}" for p in problems]
    report.ends.append(
        {"budget": budget, **_compare(save_dir / "checkpoint_last.pt", reference / "checkpoint_last.pt")}
    )


def file_states(folder) -> dict:
    """Each file's name -> (sha256 of its bytes, modification time in ns)."""
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in Path(folder).iterdir()}


def _fresh(save_dir, log_path):
    shutil.rmtree(save_dir, ignore_errors=True)
    Path(log_path).write_text("")


def _median_save_seconds(log) -> float:
    """The median time from a "Saving checkpoint to" line to its "Saved checkpoint" line in ``log``."""
    spans, began = [], None
    for line in log.splitlines():
        stamp = _STAMP.match(line)
        if stamp is None:
            continue
        if SAVING in line:
            began = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f")
        elif SAVED in line and began is not None:
            spans.append((datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f") - began).total_seconds())
            began = None
    if not spans:
        raise RuntimeError("the uninterrupted run logged no complete checkpoint save")
    return statistics.median(spans)


def _seconds_to_first_save(log) -> float:
    """Seconds from the run's first log line to its first save: the span random kills are drawn from."""
    stamps = [datetime.strptime(s, "%Y-%m-%d %H:%M:%S,%f") for s in _STAMP.findall(log[: log.find(SAVING)])]
    return max(0.5, (stamps[-1] - stamps[0]).total_seconds())


def _compare(final_path, reference_path) -> dict:
    final, reference = torch.load(final_path, map_location="cpu"), torch.load(reference_path, map_location="cpu")
    return dict(
        final_updates=final["optimizer_history"][-1]["num_updates"],
        reference_updates=reference["optimizer_history"][-1]["num_updates"],
        parameters_identical=_identical(final["model"], reference["model"]),
        optimizer_state_identical=_identical(final["last_optimizer_state"], reference["last_optimizer_state"]),
        max_abs_parameter_difference=max(
            float((a.double() - reference["model"][k].double()).abs().max())
            for k, a in final["model"].items()
            if a.is_floating_point()
        ),
    )


def _identical(a, b) -> bool:
    """Nested dicts and lists of the same values and of tensors of the same dtype and values."""
    try:
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    except (AssertionError, TypeError):
        return False
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", required=True, help="folder for the data, both save dirs and the logs")
    parser.add_argument("--data", help="a fairseq data-bin (default: the embedded demo corpus, made under --work)")
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--size", choices=sorted(SIZES), default="large")
    parser.add_argument("--max-update", type=int, help="default: 2 x kills + 10")
    parser.add_argument("--seed", type=int, default=1, help="seed of the kill schedule")
    parser.add_argument("--epoch-ends", type=int, default=0, help="also kill at and next to the first N epoch ends")
    parser.add_argument("--max-tokens", type=int, help="default: the size's (small 512, large 1024)")
    parser.add_argument("--max-epoch", type=int, help="then go on to the end of this epoch, and finish there too")
    parser.add_argument("--out", help="write the report as JSON here")
    args = parser.parse_args(argv)
    data = args.data
    if data is None:
        from .demo.prepare import prepare_demo_data

        data = prepare_demo_data(Path(args.work) / "data", train=800, valid=40, test=40, bpe_merges=400).databin
    report = run_stress(
        data,
        args.work,
        args.kills,
        args.size,
        args.max_update,
        args.seed,
        args.epoch_ends,
        args.max_tokens,
        args.max_epoch,
    )
    text = json.dumps({**asdict(report), "passed": report.passed}, indent=2)
    print(text)
    if args.out:
        write_text(args.out, text + "\n")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
