"""run_logged: the command line and all output in the log, a failure as one RunError naming the log."""

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairseq_residual_tools.errors import UserError
from fairseq_residual_tools.runner import RunError, fairseq_command, run_logged

SCRIPT = "import os, sys; print('out', os.environ['RUNNER_TEST']); print('err', file=sys.stderr); sys.exit({code})"


def test_a_successful_run_appends_its_command_line_and_output_to_the_log(tmp_path):
    log, seen = tmp_path / "sub" / "run.log", []
    log.parent.mkdir()
    log.write_text("earlier attempt\n")
    cmd = [sys.executable, "-c", SCRIPT.format(code=0)]
    run_logged(cmd, log, env={"RUNNER_TEST": "x"}, on_line=seen.append)
    lines = log.read_text().splitlines()
    assert lines[0] == "earlier attempt"
    assert lines[1] == "$ " + shlex.join(cmd)  # the command line, as a shell would run it
    assert sorted(lines[2:]) == ["err", "out x"]
    assert sorted(seen) == ["err\n", "out x\n"]


def test_a_failing_run_raises_a_user_error_with_label_status_last_line_and_log(tmp_path):
    log = tmp_path / "new" / "run.log"  # the folder is made
    with pytest.raises(RunError) as failure:
        run_logged([sys.executable, "-c", "print('first'); print('boom'); raise SystemExit(3)"], log, label="train x")
    err = failure.value
    assert isinstance(err, UserError) and err.returncode == 3 and err.last_line == "boom"
    assert str(err) == f"train x failed (exit status 3): boom; full log: {log}"
    assert log.read_text().splitlines()[1:] == ["first", "boom"]


def test_fairseq_command_runs_a_fairseq_cli_through_this_interpreter():
    assert fairseq_command("generate", "data", "--beam", 5) == [
        sys.executable,
        "-m",
        "fairseq_cli.generate",
        "data",
        "--beam",
        "5",
    ]


def test_a_stop_signal_to_the_caller_is_passed_on_and_named_in_the_error(tmp_path):
    # the child reports that it is running, then sleeps; SIGTERM reaches the caller (as from scancel)
    child = "import time; print('started', flush=True); time.sleep(30)"
    with pytest.raises(RunError) as stopped:
        run_logged(
            [sys.executable, "-c", child],
            tmp_path / "run.log",
            label="train",
            on_line=lambda line: os.kill(os.getpid(), signal.SIGTERM),
        )
    assert stopped.value.signal == "SIGTERM" and stopped.value.returncode == -signal.SIGTERM
    assert str(stopped.value).startswith("train stopped by SIGTERM (exit status -15): started;")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the caller's handler is back


def test_the_command_dies_with_a_killed_caller(tmp_path):
    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(30)"
    caller = (
        "import sys; from fairseq_residual_tools.runner import run_logged; "
        f"run_logged([sys.executable, '-c', {child!r}], {str(tmp_path / 'run.log')!r})"
    )
    proc = subprocess.Popen([sys.executable, "-c", caller])
    deadline = time.time() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
        time.sleep(0.05)
    child_pid = int(pid_file.read_text())
    proc.kill()  # SIGKILL: the caller cannot pass anything on
    proc.wait()
    while time.time() < deadline:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{child_pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            break  # killed, waiting to be reaped by init
        time.sleep(0.05)
    else:
        os.kill(child_pid, signal.SIGKILL)
        pytest.fail("the command outlived its killed caller")
