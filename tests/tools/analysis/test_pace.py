"""The pace measurement (``analysis.pace``): seconds per update between two of fairseq's log lines, and the pairs it
takes from the command line."""

import json

import pytest

from fairseq_residual_tools.analysis import pace
from fairseq_residual_tools.errors import ConfigError


def test_the_pace_is_the_wall_time_between_two_logged_updates_over_the_updates_between(tmp_path):
    log = tmp_path / "train.out"
    lines = [
        f"2026-12-07 10:00:{second:02d} | INFO | train_inner | " + json.dumps({"num_updates": str(update)})
        for update, second in ((10, 5), (20, 9), (60, 49))
    ]
    log.write_text("start-up lines\n" + "\n".join(lines) + "\n")
    assert pace.pace(log, 20, 60) == 1.0  # 40 s over 40 updates, the start-up's first 20 updates left out


def test_runs_are_named_scheme_colon_depth_and_taken_two_by_two():
    spec = pace.run_spec("residual:18")
    assert (spec.scheme, spec.layers, spec.warmup, spec.seed) == ("residual", 18, True, 1)
    assert pace.run_spec("residual:scale=0.5:6").scheme == "residual:scale=0.5"
    with pytest.raises(Exception, match="SCHEME:DEPTH"):
        pace.run_spec("residual")
    with pytest.raises(ConfigError, match="two by two"):
        pace.main(["--pairs", "pre:6", "residual:6", "hc:6"])
