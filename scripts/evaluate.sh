#!/usr/bin/env bash
# Average, decode and score one trained cell as the paper does -> results/cells/<cell>.json:
#   bash scripts/evaluate.sh --cell iwslt14/residual/e6d6 [--dry-run] [--allow-unfinished]
# Options: --help. Cells, launchers and estimates: docs/reproduce.md.
# The project's .venv first, else the active environment.
set -euo pipefail
PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin:$PATH" exec fairseq-residual-evaluate "$@"
