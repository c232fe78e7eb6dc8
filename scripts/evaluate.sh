#!/usr/bin/env bash
# Average, decode and score one trained cell as the paper does -> results/cells/<cell>.json:
#   bash scripts/evaluate.sh --cell iwslt14/residual/e6d6
# Options: --help. Cells, launchers and estimates: docs/reproduce.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON="${PYTHON:-python3}"; fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" -m fairseq_residual_tools.repro evaluate "$@"
