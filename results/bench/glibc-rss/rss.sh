#!/usr/bin/env bash
# RSS rise of one WMT E6D6 training step (2 threads), each probe in a fresh process,
# with glibc's default malloc and with a fixed 128 KiB mmap threshold (every tensor
# of 128 KiB or more gets its own mapping and goes back to the kernel when freed).
# Run 2026-11-30 ~13:40 UTC on the benchmark machine (fairseq_residual as of commit 33d4c5e); output: rss.out
# ("X=1" is the default-settings run). Columns of the JSON: see memory_probe in
# fairseq_residual/bench.py.
set -uo pipefail
cd "$(dirname "$0")/../../.."
SIZE=$(.venv/bin/python -c "import json,dataclasses;import fairseq_residual;from fairseq_residual import bench;print(json.dumps(dataclasses.asdict(bench.SIZES['wmt-e6d6'])))" 2>/dev/null)
for rep in 1 2; do
for v in '{"name":"stock-pre","label":"","scheme":null,"normalize_before":true}' '{"name":"pre","label":"","scheme":"pre","normalize_before":false}' '{"name":"residual","label":"","scheme":"residual","normalize_before":false}'; do
  for env in "X=1" "MALLOC_MMAP_THRESHOLD_=131072"; do
    echo "$rep $env $(echo $v | cut -c1-25) $(env $env .venv/bin/python -m fairseq_residual.bench memory "$SIZE" "$v" 2 2>/dev/null | tail -1)"
  done
done
done
