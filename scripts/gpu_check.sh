#!/usr/bin/env bash
# The checks that need a CUDA GPU (fp16 / memory-efficient fp16 / AMP training of Post-LN, Pre-LN and
# ResiDual at E18D18, a torchrun launch through scripts/train.sh, the benchmark with --device cuda, ResiDual
# E18D18 trained under torch.compile beside eager), in
# under ten minutes on one GPU:
#   bash scripts/gpu_check.sh [--dry-run] [--updates 200] [--skip-bench] [--out results/gpu-check] ...
# Options: --help. What it measures: fairseq_residual_tools/gpu_check.py. Writes results/gpu-check/.
# The project's .venv first, else the active environment.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON="${PYTHON:-python3}"; fi
cd "$ROOT"
exec "$PYTHON" -m fairseq_residual_tools.gpu_check "$@"
