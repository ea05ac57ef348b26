#!/usr/bin/env bash
# What vgpud can show today on one machine: a real kube-apiserver calling
# vgpud's admission webhook over TLS (certificate made and kept by vgpud),
# leader election with its label, and sample GPU pods as the API stores
# them. Scheduling onto GPUs and the device plugin join as they land.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD/scripts
. "$here/common.sh"
need_root demo
hosts_entry

"$here/apiserver.sh" down
kubeconfig=$("$here/apiserver.sh" up)
export KUBECONFIG=$kubeconfig
go build -o bin/vgpud .
log=/var/lib/vgpud-e2e/demo-vgpud.log
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	"$here/apiserver.sh" down
}
trap cleanup EXIT

for ns in vgpud-system demo; do
	kubectl create namespace $ns >/dev/null
	kubectl -n $ns create serviceaccount default >/dev/null # no controller-manager here
done
kubectl -n vgpud-system run vgpud-demo --image=vgpud --restart=Never >/dev/null # the replica's pod, for its leader label
# The manifest's webhook, pointed at the leader on loopback by URL (no kube-proxy here).
sed -e '/service:/,/port: 443/c\      url: https://vgpud.vgpud-system.svc:9443/webhook' webhook/testdata/mutatingwebhookconfiguration.yaml | kubectl apply -f - >/dev/null

./bin/vgpud run --roles=cluster --pod-name=vgpud-demo --pod-namespace=vgpud-system --kubeconfig="$kubeconfig" --metrics-listen= --log-format=text >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do curl -sfk https://127.0.0.1:9443/readyz >/dev/null && break; sleep 0.2; done
echo "== vgpud leader (label vgpud.io/role) and its webhook certificate"
kubectl -n vgpud-system get pods -L vgpud.io/role
kubectl -n vgpud-system get secret vgpud-tls
echo
kubectl -n demo create quota gpu --hard=requests.nvidia.com/gpumem=60000 >/dev/null
pod() { # name, limits as "k: v" lines
	printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: demo}\nspec:\n  containers:\n  - name: work\n    image: busybox\n    resources:\n      limits: {%s}\n%s' "$1" "$2" "${3:-}"
}
echo "== sample pods through kube-apiserver"
pod share-3g 'nvidia.com/gpumem: "3000"' | kubectl apply -f -
pod share-5g 'nvidia.com/gpumem: "5000", nvidia.com/gpucores: "30"' | kubectl apply -f -
pod whole-gpu 'nvidia.com/gpu: "1"' | kubectl apply -f -
pod two-gpus 'nvidia.com/gpu: "2", nvidia.com/gpumem: "20000"' | kubectl apply -f -
echo
echo "== what the webhook changed (schedulerName, defaults, exclusive cores, requests)"
kubectl -n demo get pods -o custom-columns='POD:.metadata.name,SCHEDULER:.spec.schedulerName,GPU:.spec.containers[0].resources.limits.nvidia\.com/gpu,MEM-MiB:.spec.containers[0].resources.limits.nvidia\.com/gpumem,CORES:.spec.containers[0].resources.limits.nvidia\.com/gpucores'
echo
echo "== pods the webhook refuses, with the reason kubectl shows"
pod over-quota 'nvidia.com/gpu: "2", nvidia.com/gpumem: "15000"' | kubectl apply -f - 2>&1 | sed 's/^/  /' || true
pod privileged 'nvidia.com/gpu: "1"' '    securityContext: {privileged: true}
' | kubectl apply -f - 2>&1 | sed 's/^/  /' || true
echo
echo "vgpud's log: $log"
