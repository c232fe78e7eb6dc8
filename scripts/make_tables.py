#!/usr/bin/env python3
"""Write results/tables.md (as the console command ``fairseq-residual-tables``):

python scripts/make_tables.py [--results results/cells] [--work checkpoints] [--out results/tables.md]
"""

import sys

import repo_venv

repo_venv.use()
from fairseq_residual_tools.console import tables  # noqa: E402

if __name__ == "__main__":
    sys.exit(tables())
