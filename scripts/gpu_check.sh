#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run of at most nine minutes (what runs, in which order, for how long:
# fairseq_residual_tools/gpu_check/plan.py; --dry-run lists every run with its estimate):
#   bash scripts/gpu_check.sh [--bundle DIR] [--dry-run | --cpu-tiny | --calibrate] [--out DIR] ...   (--help)
# --bundle DIR: on an offline node without fairseq, install the wheels of `make gpu-bundle` into a temporary folder
# first (pip --no-index --no-deps), check that they import with the node's torch, and run with them.
# Python: the project's .venv if there is one, else $PYTHON, else python3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON="${PYTHON:-python3}"; fi
cd "$ROOT"
export GPU_CHECK_STARTED="${GPU_CHECK_STARTED:-$(date +%s)}"
args=()
while [[ $# -gt 0 ]]; do
  if [[ "$1" == --bundle ]]; then
    [[ $# -ge 2 ]] || { echo "error: --bundle needs a folder (made by make gpu-bundle)" >&2; exit 2; }
    bundle="$2"; shift 2
  else
    args+=("$1"); shift
  fi
done
if [[ -n "${bundle:-}" ]]; then
  target="$(mktemp -d "${TMPDIR:-/tmp}/fairseq-residual-bundle.XXXXXX")"
  "$PYTHON" -m fairseq_residual_tools.gpu_bundle install --bundle "$bundle" --target "$target"
  export PYTHONPATH="$ROOT:$target${PYTHONPATH:+:$PYTHONPATH}" PATH="$target/bin:$PATH" GPU_CHECK_BUNDLE="$bundle"
fi
exec "$PYTHON" -m fairseq_residual_tools.gpu_check "${args[@]}"
