#!/usr/bin/env python
"""CPU-scale depth x warmup study; see fairseq_residual_tools/analysis/study.py and results/cpu-study/.

nice -n 5 .venv/bin/python scripts/cpu_study.py            # the full study (resumable)
.venv/bin/python scripts/cpu_study.py --help
"""

import sys

import repo_venv

repo_venv.use()
from fairseq_residual_tools.console import cpu_study  # noqa: E402

if __name__ == "__main__":
    sys.exit(cpu_study())
