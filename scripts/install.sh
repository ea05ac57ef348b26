#!/usr/bin/env bash
# Installs vgpud on the local cluster from manifests/ with the mock overlay
# and waits until it serves: DaemonSet ready, a leader labelled, the
# webhook's caBundle set, every node advertising nvidia.com/gpu, and the
# vgpud-scheduler ready. Expects KUBECONFIG (scripts/cluster.sh up).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s%N)
kubectl kustomize --load-restrictor=LoadRestrictionsNone manifests/mock | kubectl apply -f - >/dev/null
kubectl -n vgpud-system rollout status ds/vgpud --timeout=180s >/dev/null
kubectl -n vgpud-system rollout status deploy/vgpud-scheduler --timeout=180s >/dev/null
for _ in $(seq 1 120); do
	leader=$(kubectl -n vgpud-system get pods -l vgpud.io/role=leader -o name)
	ca=$(kubectl get mutatingwebhookconfiguration vgpud -o jsonpath='{.webhooks[0].clientConfig.caBundle}')
	# The fewest any node advertises: 0 until every node's plugin serves.
	gpus=$(kubectl get nodes -o jsonpath='{range .items[*]}{.status.allocatable.nvidia\.com/gpu}{"\n"}{end}' | awk '{n = $1 + 0; if (NR == 1 || n < m) m = n} END {print m + 0}')
	[ -n "$leader" ] && [ -n "$ca" ] && [ "${gpus:-0}" -gt 0 ] && break
	sleep 0.5
done
[ -n "$leader" ] && [ -n "$ca" ] && [ "${gpus:-0}" -gt 0 ] || { echo "install: vgpud did not come up (leader '$leader', caBundle ${#ca} bytes, nvidia.com/gpu '$gpus')" >&2; exit 1; }
echo "install: vgpud serving in $((($(date +%s%N) - start) / 1000000)) ms (leader $leader; every node advertises nvidia.com/gpu, at least $gpus)" >&2
