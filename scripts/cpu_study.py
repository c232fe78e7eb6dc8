#!/usr/bin/env python
"""CPU-scale depth x warmup study; see fairseq_residual_tools/analysis/study.py and results/cpu-study/.

nice -n 5 .venv/bin/python scripts/cpu_study.py            # the full study (resumable)
.venv/bin/python scripts/cpu_study.py --help
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fairseq_residual_tools.analysis.study import main  # noqa: E402

if __name__ == "__main__":
    main()
