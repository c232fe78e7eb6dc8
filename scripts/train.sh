#!/usr/bin/env bash
# Train one cell of the paper's tables (resumes from its checkpoint_last.pt):
#   bash scripts/train.sh --cell iwslt14/residual/e6d6 [--gpus 8] [--nodes 2] [--dry-run] [-- HYDRA_OVERRIDES]
# Options: --help. Cells, launchers and estimates: docs/reproduce.md.
# The project's .venv first, else the active environment.
set -euo pipefail
PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin:$PATH" exec fairseq-residual-train "$@"
