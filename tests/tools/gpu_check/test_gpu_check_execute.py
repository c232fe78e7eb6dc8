"""Running a part of the GPU check: its runs at once, each one's follow-up as soon as it has finished."""

import sys

from fairseq_residual_tools.gpu_check import plan
from fairseq_residual_tools.gpu_check.execute import run_part


def test_each_runs_scoring_starts_as_soon_as_it_has_trained_while_the_others_go_on(tmp_path):
    def sleeper(label, seconds, stamp):
        code = f"import time; time.sleep({seconds}); open({str(stamp)!r}, 'w').write(str(time.time()))"
        return plan.Run(label, [sys.executable, "-c", code], f"{label}-{stamp.name}.log", seconds)

    fast, slow = (sleeper(label, s, tmp_path / f"{label}.trained") for label, s in (("fast", 0.2), ("slow", 3.0)))
    then = [sleeper(label, 0.0, tmp_path / f"{label}.scored") for label in ("fast", "slow")]
    results = run_part(plan.Part("p", "p", [fast, slow], 0.0, then=then), tmp_path, None)
    stamps = {p.name: float(p.read_text()) for p in tmp_path.glob("*.*ed")}
    assert stamps["fast.scored"] < stamps["slow.trained"] < stamps["slow.scored"]
    assert "error" not in results["fast"]["then"] and "error" not in results["slow"]["then"]
