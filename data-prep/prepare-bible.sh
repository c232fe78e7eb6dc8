#!/usr/bin/env bash
# Prepare bible: see data-prep/README.md, or run with --help. The project's .venv first, else the active environment.
set -euo pipefail
PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin:$PATH" exec fairseq-residual-prepare-bible "$@"
