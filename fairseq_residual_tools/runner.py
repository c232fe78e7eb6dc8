"""Running fairseq's command-line tools with their output in a log file.

Each attempt's output follows its command line (``$ python -m fairseq_cli.train ...``) in the log.
A SIGTERM, SIGINT or SIGHUP to the caller (SLURM preemption, ``scancel``, Ctrl-C) is passed on to the
command, and ``RunError`` names it; a SIGKILLed caller takes the command with it (``PR_SET_PDEATHSIG``
on Linux), so no orphan keeps writing checkpoints while the same command, run again, resumes from them.
"""

import ctypes
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from .errors import UserError

#: the plugin that ``--user-dir`` loads
PLUGIN_DIR = Path(__file__).resolve().parents[1] / "fairseq_residual"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class RunError(UserError):
    """A command exited with a non-zero status (``signal``: the stop signal passed on to it, if any)."""

    def __init__(self, label: str, returncode: int, last_line: str, log_path: Path, signal: Optional[str] = None):
        self.returncode, self.last_line, self.signal = returncode, last_line, signal
        how = f"stopped by {signal}" if signal else "failed"
        super().__init__(
            f"{label} {how} (exit status {returncode}): {last_line or '(no output)'}; full log: {log_path}"
        )


def fairseq_command(entry: str, *args: object) -> List[str]:
    """``python -m fairseq_cli.<entry> ARGS`` through this interpreter (its environment, its fairseq)."""
    return [sys.executable, "-m", f"fairseq_cli.{entry}", *map(str, args)]


def run_logged(
    cmd: Sequence[str],
    log_path: Path,
    *,
    env: Optional[Dict[str, str]] = None,
    label: Optional[str] = None,
    on_line: Optional[Callable[[str], object]] = None,
    timeout: Optional[float] = None,
) -> None:
    """Run ``cmd`` with stdout and stderr appended to ``log_path``; raise ``RunError`` if it fails. ``env`` is set on
    top of this process's environment; ``on_line`` sees every output line as it is logged (for progress on the
    console); ``label`` names the command in the error; after ``timeout`` seconds the command gets SIGTERM (SIGKILL
    10 s later) and the error says so. Stop signals are passed on from the main thread only (Python handles
    signals there)."""
    cmd, log_path = list(map(str, cmd)), Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    last_line, received = "", []
    with open(log_path, "a", encoding="utf-8", buffering=1) as log:  # line-buffered: the log can be followed
        log.write(f"$ {shlex.join(cmd)}\n")
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env={**os.environ, **(env or {})},
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )

        def forward(signum, _frame):
            received.append(signal.Signals(signum).name)
            proc.send_signal(signum)

        main_thread = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS} if main_thread else {}
        timer = threading.Timer(timeout, _stop, (proc, received, timeout)) if timeout is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            for line in proc.stdout or ():
                log.write(line)
                last_line = line.strip() or last_line
                if on_line is not None:
                    on_line(line)
            returncode = proc.wait()
        finally:
            if timer is not None:
                timer.cancel()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    if returncode != 0:
        raise RunError(label or Path(cmd[0]).name, returncode, last_line, log_path, received[0] if received else None)


def _stop(proc: subprocess.Popen, received: List[str], timeout: float) -> None:
    """The end of a run's time: SIGTERM, and SIGKILL if it is still there 10 s later."""
    received.append(f"the time limit ({timeout:.0f} s)")
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _die_with_parent() -> None:
    """In the child, before exec: the kernel sends it SIGKILL when its parent dies."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
