"""What the scripts/*.py callers run first, as the .sh callers do: the repository's .venv when there is one (the
script is started again with its Python), else the active environment with the repository on ``sys.path``."""

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def use() -> None:
    python = REPO / ".venv" / "bin" / "python"
    if python.is_file() and Path(sys.prefix).resolve() != python.parent.parent.resolve():
        os.execv(python, [str(python), *sys.argv])
    sys.path.insert(0, str(REPO))
