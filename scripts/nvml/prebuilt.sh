#!/usr/bin/env bash
# The GPU proof (make nvml) from test binaries built elsewhere, for a
# machine with an NVIDIA GPU, its driver and PyTorch or CuPy but no Go.
# Where Go is:
#   go test -c -o DIR/node.test ./node
#   go test -c -o DIR/gpu.test ./node/internal/gpu
# (gzip them if they must travel small), then on the GPU machine, from
# the repository's root: scripts/nvml/prebuilt.sh DIR
# Reads the GPU; changes none of its settings (the fault test makes one
# kernel fault, an application XID the driver recovers from). On a GPU
# already in MIG mode, the MIG proof makes one instance where nothing is
# and destroys it; it never changes the MIG mode.
set -u
dir=$(cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
for f in "$dir"/*.test.gz; do
	[ -e "$f" ] && gunzip -kf "$f" && chmod +x "${f%.gz}"
done
nvidia-smi --query-gpu=index,name,driver_version,memory.total,mig.mode.current --format=csv
export VGPUD_TEST_NVML=1
export VGPUD_TEST_NVML_FAULT="python3 $repo/scripts/nvml/fault.py"
export VGPUD_TEST_NVML_HOG="python3 $repo/scripts/nvml/hog.py"
rc=0
(cd "$repo/node/internal/gpu" && "$dir/gpu.test" -test.run NVML -test.v -test.count=1 -test.timeout 120s) || rc=1
(cd "$repo/node" && "$dir/node.test" -test.run NVML -test.v -test.count=1 -test.timeout 240s) || rc=1
exit $rc
