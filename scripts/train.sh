#!/usr/bin/env bash
# Train one cell of the paper's tables (resumes from its checkpoint_last.pt):
#   bash scripts/train.sh --cell iwslt14/residual/e6d6 [--gpus 8] [--nodes 2] [--dry-run] [-- HYDRA_OVERRIDES]
# Options: --help. Cells, launchers and estimates: docs/reproduce.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON="${PYTHON:-python3}"; fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" -m fairseq_residual_tools.repro train "$@"
