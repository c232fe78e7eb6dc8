"""The console commands of ``[project.scripts]`` in pyproject.toml (``fairseq-residual-*``).

Each imports its tool only when run (``--help`` of data preparation loads neither torch nor fairseq)
and reports a ``UserError`` as one line ``error: ...`` with exit status 1.
"""

import sys
from importlib import import_module
from typing import Callable

from .errors import exit_on_user_error


def _command(module: str, *subcommand: str) -> Callable[[], int]:
    """A command running ``fairseq_residual_tools.<module>.main`` on ``subcommand`` + the command line."""

    def command() -> int:
        main = import_module(f"fairseq_residual_tools.{module}").main
        return exit_on_user_error(main, [*subcommand, *sys.argv[1:]])

    return command


prepare_iwslt14 = _command("dataprep.iwslt14")
prepare_wmt14 = _command("dataprep.wmt14")
prepare_opus100 = _command("dataprep.opus100")
prepare_custom = _command("dataprep.custom")
train = _command("repro.cli", "train")
evaluate = _command("repro.cli", "evaluate")
reproduce = _command("repro.cli", "reproduce")
tables = _command("repro.cli", "tables")
probe = _command("analysis.probes")
cpu_study = _command("analysis.study")
demo = _command("demo.run")
bench = _command("bench.cli")
