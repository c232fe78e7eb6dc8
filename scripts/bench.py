#!/usr/bin/env python
"""Speed and memory of the schemes beside fairseq's stock transformer; see fairseq_residual_tools/bench/.

.venv/bin/python scripts/bench.py --malloc keep      # what `make bench` runs: every size -> results/bench/
.venv/bin/python scripts/bench.py --sizes iwslt-e6d6 --schemes all --out /tmp/bench
.venv/bin/python scripts/bench.py --counts-only     # then (make bench): operations, FLOPs, bytes of every scheme
"""

import sys

import repo_venv

repo_venv.use()
from fairseq_residual_tools.console import bench  # noqa: E402

if __name__ == "__main__":
    sys.exit(bench())
