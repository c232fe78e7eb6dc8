#!/usr/bin/env python3
"""Write results/tables.md: every cell measured so far beside the paper's figure.

python scripts/make_tables.py [--results results/cells] [--work checkpoints] [--out results/tables.md]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fairseq_residual_tools.repro.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["tables", *sys.argv[1:]]))
