#!/usr/bin/env bash
# The chaos soak alone, on a fresh cluster (VGPUD_NODES, default 3):
# ROUNDS rounds of faults under a GPU-pod workload, the invariants checked
# after each.
# `make test` runs the same soak (3 rounds) after the e2e scenarios.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD/scripts
. "$here/common.sh"
need_root chaos

"$here/cluster.sh" down
trap '"$here/cluster.sh" down' EXIT
kubeconfig=$("$here/cluster.sh" up)
KUBECONFIG=$kubeconfig VGPUD_SCRIPTS=$here VGPUD_CHAOS_ROUNDS=${ROUNDS:-20} \
	gotest -tags e2e -count=1 -timeout 120m -run TestChaosSoak ./scripts/e2e/cluster/
