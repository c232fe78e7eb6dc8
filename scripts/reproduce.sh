#!/usr/bin/env bash
# Every cell of one table, in order, resumable (finished cells are skipped), then results/tables.md:
#   bash scripts/reproduce.sh --table iwslt14 [--gpus 8] [--dry-run] [--list]
# Options: --help. Cells, launchers and estimates: docs/reproduce.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON="${PYTHON:-python3}"; fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" -m fairseq_residual_tools.repro reproduce "$@"
