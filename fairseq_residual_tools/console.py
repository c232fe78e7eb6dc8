"""The console commands of ``[project.scripts]`` in pyproject.toml (``fairseq-residual-*``).

Each imports its tool only when run (``--help`` of data preparation loads neither torch nor fairseq)
and reports a ``UserError`` as one line ``error: ...`` with exit status 1. The known third-party warnings
and log lines are silenced first (``fairseq_residual/quiet.py``).
"""

import sys
from functools import partial
from importlib import import_module

from . import quiet_third_party
from .errors import exit_on_user_error


def _run(module: str, *subcommand: str) -> int:
    """``fairseq_residual_tools.<module>.main`` on ``subcommand`` + the command line."""
    quiet_third_party()
    main = import_module(f"fairseq_residual_tools.{module}").main
    return exit_on_user_error(main, [*subcommand, *sys.argv[1:]])


prepare_iwslt14 = partial(_run, "dataprep.iwslt14")
prepare_wmt14 = partial(_run, "dataprep.wmt14")
prepare_opus100 = partial(_run, "dataprep.opus100")
prepare_custom = partial(_run, "dataprep.custom")
prepare_monolingual = partial(_run, "dataprep.monolingual")
prepare_bible = partial(_run, "dataprep.bible")
train = partial(_run, "repro.cli", "train")
evaluate = partial(_run, "repro.cli", "evaluate")
average_checkpoints = partial(_run, "average_checkpoints")
reproduce = partial(_run, "repro.cli", "reproduce")
tables = partial(_run, "repro.cli", "tables")
probe = partial(_run, "analysis.probes")
cpu_study = partial(_run, "analysis.study")
bible_study = partial(_run, "analysis.bible_study")
demo = partial(_run, "demo.run")
bench = partial(_run, "bench.cli")
