#!/usr/bin/env bash
# Every cell of one table, in order, resumable (finished cells are skipped), then results/tables.md:
#   bash scripts/reproduce.sh --table iwslt14 [--gpus 8] [--dry-run] [--list]
# Options: --help. Cells, launchers and estimates: docs/reproduce.md.
# The project's .venv first, else the active environment.
set -euo pipefail
PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin:$PATH" exec fairseq-residual-reproduce "$@"
