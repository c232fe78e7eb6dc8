"""run_logged: the command line and all output in the log, a failure as one RunError naming the log."""

import shlex
import sys

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
