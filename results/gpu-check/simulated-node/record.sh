#!/usr/bin/env bash
# The simulated node's record: the bundle installed as on the node, the check's whole CPU path through --bundle.
set -uo pipefail
cd /tmp/simrec
NODE=/work/sim/node312/bin/python
R=/tmp/simrec-out; rm -rf $R; mkdir -p $R
$NODE -m pip list --disable-pip-version-check 2>/dev/null > $R/node-packages.txt
cp gpu-bundle/manifest.json $R/
start=$(date +%s)
PYTHON=$NODE bash scripts/gpu_check.sh --bundle gpu-bundle --cpu-tiny --with-compiled --out $R/check --work /tmp/simrec-work > $R/console.txt 2>&1
echo "rc=$? wall=$(( $(date +%s) - start ))s" >> $R/console.txt
