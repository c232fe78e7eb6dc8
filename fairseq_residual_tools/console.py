"""The console commands of ``[project.scripts]`` in pyproject.toml (``fairseq-residual-*``).

Each command imports its tool only when run, so ``fairseq-residual-prepare-custom --help``
loads neither torch nor fairseq, and reports a ``UserError`` as one line ``error: ...``
with exit status 1. ``data-prep/*.sh`` and ``scripts/*`` are one-line callers of these.
"""

import sys
from importlib import import_module
from typing import Sequence

from .errors import exit_on_user_error


def _run(module: str, subcommand: Sequence[str] = ()) -> int:
    main = import_module(f"fairseq_residual_tools.{module}").main
    return exit_on_user_error(main, [*subcommand, *sys.argv[1:]])


def prepare_iwslt14() -> int:
    return _run("dataprep.iwslt14")


def prepare_wmt14() -> int:
    return _run("dataprep.wmt14")


def prepare_opus100() -> int:
    return _run("dataprep.opus100")


def prepare_custom() -> int:
    return _run("dataprep.custom")


def train() -> int:
    return _run("repro.cli", ["train"])


def evaluate() -> int:
    return _run("repro.cli", ["evaluate"])


def reproduce() -> int:
    return _run("repro.cli", ["reproduce"])


def tables() -> int:
    return _run("repro.cli", ["tables"])


def probe() -> int:
    return _run("analysis.probes")


def cpu_study() -> int:
    return _run("analysis.study")


def demo() -> int:
    return _run("demo.run")


def bench() -> int:
    return _run("bench.cli")
