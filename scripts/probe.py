#!/usr/bin/env python
"""Gradient-norm and representation-diversity probes; see fairseq_residual_tools/analysis/probes.py.

.venv/bin/python scripts/probe.py                       # every scheme, depths 6 12 18 48, seeds 1 2 3
.venv/bin/python scripts/probe.py --checkpoint CKPT.pt --data DATA_BIN --out DIR
"""

import sys

import repo_venv

repo_venv.use()
from fairseq_residual_tools.console import probe  # noqa: E402

if __name__ == "__main__":
    sys.exit(probe())
