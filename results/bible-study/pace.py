"""Seconds per update of the plan's models under the study's recipe (``analysis.pace``): each pair of PAIRS side by
side, one torch thread each, 150 updates timed from update 50, at the study's default settings. Run it with the study
paused (SIGSTOP): it measures the machine's two cores.

    .venv/bin/python results/bible-study/pace.py [WORK] > results/bible-study/pace.md
"""

import sys
from pathlib import Path

from fairseq_residual_tools.analysis import bible_study
from fairseq_residual_tools.analysis.pace import measure
from fairseq_residual_tools.analysis.study import RunSpec

UPDATES, SKIP = 150, 50
PAIRS = [
    (RunSpec("pre", 6, True, 1), RunSpec("hc", 6, True, 1)),
    (RunSpec("siamese", 6, True, 1), RunSpec("attn-res", 6, True, 1)),
    (RunSpec("pre", 12, True, 1), RunSpec("residual", 12, True, 1)),
]

if __name__ == "__main__":
    work = Path(sys.argv[1] if len(sys.argv) > 1 else "work/bible-study")
    command = f".venv/bin/python results/bible-study/pace.py {work}"
    print("\n".join(measure(PAIRS, bible_study.parse_args(["--work", str(work)]), SKIP, UPDATES, command, "pre E6D6")))
