#!/usr/bin/env bash
# The part bible rehearsed on the simulated node: a copy of the commit as it travels (the tree, gpu-bundle/ and
# gpu-bible/ carried), the bundle installed as on the node, the GPU's command with --cpu-tiny added.
set -uo pipefail
COMMIT=${1:?the commit to rehearse}
NODE=/work/gpu-sim/node312/bin/python        # Python 3.12.1, torch 2.11.0+cu130 and the node's packages
R=/tmp/simrec-bible-out; rm -rf /tmp/simrec-bible /tmp/simrec-bible-work $R; mkdir -p /tmp/simrec-bible $R
git -C /work/wt-gpu archive "$COMMIT" | tar -x -C /tmp/simrec-bible
cp -r /work/gpu-sim/gpu-bundle /work/wt-gpu/gpu-bible /tmp/simrec-bible/
cd /tmp/simrec-bible
cp gpu-bundle/manifest.json $R/bundle-manifest.json
start=$(date +%s)
PYTHON=$NODE bash scripts/gpu_check.sh --bundle gpu-bundle --only bible --cpu-tiny --out $R/check \
  --work /tmp/simrec-bible-work > $R/console.txt 2>&1
echo "rc=$? wall=$(( $(date +%s) - start ))s" >> $R/console.txt
