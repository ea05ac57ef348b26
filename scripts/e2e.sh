#!/usr/bin/env bash
# The real-apiserver suite: a fresh etcd + kube-apiserver on loopback,
# vgpud's cluster role as separate processes, tests in scripts/e2e.
# Needs root (packages, /etc/hosts, /var/lib). Exit status is the tests'.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD/scripts
. "$here/common.sh"
need_root e2e

hosts_entry
"$here/apiserver.sh" down
trap '"$here/apiserver.sh" down' EXIT
start=$(date +%s%N)
kubeconfig=$("$here/apiserver.sh" up)
echo "e2e: etcd + kube-apiserver ready in $((($(date +%s%N) - start) / 1000000)) ms"

make -s build # the binary the images ship
KUBECONFIG=$kubeconfig VGPUD_BIN=$PWD/bin/vgpud gotest -tags e2e -count=1 -timeout 10m ./scripts/e2e/
# DRA: the node's devices booked by a stock kube-scheduler, no extender.
KUBECONFIG=$kubeconfig VGPUD_K8S_BIN=$("$here/k8s-binaries.sh") gotest -tags e2e -count=1 -timeout 5m ./node/internal/dra/
"$here/apiserver.sh" down

# Kueue built (cached) before the cluster suite, not inside its timeout:
# cold, the build takes minutes of it. A failed build stops nothing here:
# the Kueue scenario builds again, and fails alone.
start=$(date +%s%N)
if "$here/kueue.sh" build; then
	echo "e2e: Kueue built (or cached) in $((($(date +%s%N) - start) / 1000000)) ms"
else
	echo "e2e: building Kueue failed; the cluster suite's Kueue scenario tries again" >&2
fi

# The cluster (three nodes unless VGPUD_NODES says otherwise): fresh state,
# vgpud installed by the first scenario.
"$here/cluster.sh" down
trap '"$here/cluster.sh" down' EXIT
start=$(date +%s%N)
kubeconfig=$("$here/cluster.sh" up)
echo "e2e: cluster of ${VGPUD_NODES:-3} node(s) ready in $((($(date +%s%N) - start) / 1000000)) ms"
# Each with its own bound: on a 2-core machine slower than the last,
# TestCluster took 1363 s and left the soak 137 s of a shared 25 min.
# The soak runs whether or not a scenario failed, as it did in one call.
rc=0
KUBECONFIG=$kubeconfig VGPUD_SCRIPTS=$here gotest -tags e2e -count=1 -timeout 35m -run '^TestCluster$' ./scripts/e2e/cluster/ || rc=$?
KUBECONFIG=$kubeconfig VGPUD_SCRIPTS=$here gotest -tags e2e -count=1 -timeout 15m -run '^TestChaosSoak$' ./scripts/e2e/cluster/ || rc=$?
if [ "$rc" != 0 ]; then
	echo "e2e: the cluster suite or the soak failed (exit $rc)" >&2
	exit "$rc"
fi
"$here/cluster.sh" down

# The Kubernetes versions around the suite's, as docs/compatibility.md
# lists them: a fresh two-node cluster each (the leader's failover needs
# a second replica), TestCompat alone.
# The first installs every object under another name (the chart's
# fullnameOverride): a real install, failover and removal that way.
fullname=gpushare
for v in ${VGPUD_COMPAT_VERSIONS:-v1.34.4 v1.37.2}; do
	"$here/cluster.sh" down
	start=$(date +%s%N)
	kubeconfig=$(K8S_VERSION=$v VGPUD_NODES=2 "$here/cluster.sh" up)
	echo "e2e: Kubernetes $v cluster of 2 nodes ready in $((($(date +%s%N) - start) / 1000000)) ms"
	KUBECONFIG=$kubeconfig VGPUD_SCRIPTS=$here VGPUD_COMPAT=1 VGPUD_FULLNAME=$fullname gotest -tags e2e -count=1 -timeout 10m -run TestCompat ./scripts/e2e/cluster/
	echo "e2e: Kubernetes $v (objects named $fullname): compatibility scenario and cluster in $((($(date +%s%N) - start) / 1000000000)) s"
	fullname=vgpud
done
"$here/cluster.sh" down

# The fallback: one node on Debian's containerd 1.6, which has no NRI.
start=$(date +%s%N)
kubeconfig=$(VGPUD_CONTAINERD=1.6 VGPUD_NODES=1 "$here/cluster.sh" up)
echo "e2e: containerd 1.6 node ready in $((($(date +%s%N) - start) / 1000000)) ms"
KUBECONFIG=$kubeconfig VGPUD_SCRIPTS=$here VGPUD_CONTAINERD=1.6 gotest -tags e2e -count=1 -timeout 10m -run TestFallback ./scripts/e2e/cluster/
