#!/usr/bin/env bash
# The demo's DRA part (scripts/demo.sh runs it last): vgpud-node moves to
# DRA mode with the demo's pods still on it (the GPUs they hold are
# tainted for claims until they end), and the same sharing workloads,
# written for vgpud in a namespace labelled vgpud.io/gpu-claims=true,
# become claims that the stock kube-scheduler places there. Prints each
# pod's claim, GPU and what its container sees, the node's devices, and
# the cluster view with the claims beside the extender's pods.
# The mock node has no NVIDIA CDI spec; a fake one is written, as the
# end-to-end DRA scenario does (cluster.sh down removes it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
need_root demo-dra

node=vgpud-node
ns=vgpud-demo-dra

# "reset", before a demo runs again on the cluster left up: the claims'
# pods go while the node still serves claims (kubelet has it unprepare
# them), then the node serves the device plugin again.
if [ "${1:-}" = reset ]; then
	kubectl get namespace $ns >/dev/null 2>&1 || exit 0
	kubectl delete namespace $ns --wait --timeout=120s >/dev/null
	overrides=$(kubectl -n vgpud-system get configmap vgpud -o jsonpath='{.data.node-overrides\.yaml}')
	overrides=$(grep -v -e "^  - name: $node\$" -e "^    dra: true\$" <<<"$overrides" || true)
	kubectl -n vgpud-system patch configmap vgpud --type merge -p "$(jq -n --arg v "$overrides" '{data: {"node-overrides.yaml": $v}}')" >/dev/null
	kubectl -n vgpud-system delete pod -l app.kubernetes.io/component=node --field-selector spec.nodeName=$node >/dev/null
	exit 0
fi
inv=$(kubectl get node $node -o jsonpath='{.metadata.annotations.vgpud\.io/gpus}')

# The node's NVIDIA CDI spec, as nvidia-ctk cdi generate writes one:
# a device per GPU index, and nvidiactl for all.
dir=/var/lib/vgpud-e2e/cdi
mkdir -p $dir /etc/cdi
nodes=()
for i in $(jq -r '.gpus[].index' <<<"$inv"); do
	rm -f $dir/nvidia$i
	mknod -m 666 $dir/nvidia$i c 195 "$i"
	nodes+=("{path: /dev/nvidia$i, hostPath: $dir/nvidia$i}")
done
rm -f $dir/nvidiactl
mknod -m 666 $dir/nvidiactl c 195 255
{
	echo 'cdiVersion: "0.6.0"'
	echo 'kind: nvidia.com/gpu'
	echo 'devices:'
	for i in $(jq -r '.gpus[].index' <<<"$inv"); do
		printf '  - name: "%s"\n    containerEdits:\n      deviceNodes: [{path: /dev/nvidia%s, hostPath: %s/nvidia%s}]\n' "$i" "$i" $dir "$i"
	done
	printf '  - name: all\n    containerEdits:\n      deviceNodes: [%s]\n' "$(IFS=,; echo "${nodes[*]}")"
	printf 'containerEdits:\n  deviceNodes: [{path: /dev/nvidiactl, hostPath: %s/nvidiactl}]\n' $dir
} >/etc/cdi/vgpud-e2e-nvidia.yaml.tmp
mv /etc/cdi/vgpud-e2e-nvidia.yaml.tmp /etc/cdi/vgpud-e2e-nvidia.yaml

echo
echo "== DRA mode: $node serves claims (dra: true in its per-node overrides), the demo's pods still on it"
overrides=$(kubectl -n vgpud-system get configmap vgpud -o jsonpath='{.data.node-overrides\.yaml}')
if ! grep -q "dra: true" <<<"$overrides"; then
	overrides=$(printf '%s\n  - name: %s\n    dra: true\n' "${overrides%$'\n'}" $node)
	kubectl -n vgpud-system patch configmap vgpud --type merge -p "$(jq -n --arg v "$overrides" '{data: {"node-overrides.yaml": $v}}')" >/dev/null
fi
old=$(kubectl -n vgpud-system get pods -l app.kubernetes.io/component=node --field-selector spec.nodeName=$node -o jsonpath='{.items[0].metadata.uid}')
kubectl -n vgpud-system delete pod -l app.kubernetes.io/component=node --field-selector spec.nodeName=$node --wait=false >/dev/null
# Ready, a new pod, its GPUs published as devices.
for i in $(seq 1 120); do
	ready=$(kubectl -n vgpud-system get pods -l app.kubernetes.io/component=node --field-selector spec.nodeName=$node -o json |
		jq --arg old "$old" '[.items[] | select(.metadata.uid != $old and .metadata.deletionTimestamp == null) |
			select(any(.status.conditions[]?; .type == "Ready" and .status == "True"))] | length')
	n=$(kubectl get resourceslices --field-selector spec.nodeName=$node -o json | jq '[.items[] | select(.spec.driver == "gpu.vgpud.io") | .spec.devices[]] | length')
	[ "$ready" -eq 1 ] && [ "$n" -gt 0 ] && break
	[ "$i" -eq 120 ] && { echo "demo-dra: $node does not serve claims after 120 s" >&2; exit 1; }
	sleep 1
done
kubectl get resourceslices --field-selector spec.nodeName=$node -o json | jq -r '
	["DEVICE", "UUID", "MEMORY", "CORES", "SLOTS", "TAINTS"],
	(.items[] | select(.spec.driver == "gpu.vgpud.io") | .spec.devices[] |
	[.name[0:16], .attributes.uuid.string[0:12], .capacity.memory.value, .capacity.cores.value, .capacity.slots.value,
	 ([.taints[]?.key | sub("gpu.vgpud.io/"; "")] | join(",") | if . == "" then "-" else . end)]) | @tsv' | column -t

kubectl delete namespace $ns --ignore-not-found --wait >/dev/null
kubectl create namespace $ns >/dev/null
kubectl label namespace $ns vgpud.io/gpu-claims=true >/dev/null
claimpod() { # claimpod NAME LIMITS-JSON
	kubectl -n $ns apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
spec:
  restartPolicy: Never
  nodeSelector: {kubernetes.io/hostname: $node}
  containers:
    - name: main
      image: vgpud.local/busybox:1
      command: [sh, -c, "env | grep -E '^(NVIDIA_VISIBLE_DEVICES|CUDA_)' | sort; sleep 3600"]
      resources: {limits: $2}
YAML
}
echo
echo "== the demo's sharing pods, written for vgpud, in namespace $ns (labelled vgpud.io/gpu-claims=true)"
claimpod share-10g '{nvidia.com/gpumem: "10000", nvidia.com/gpucores: "30"}'
claimpod share-20g '{nvidia.com/gpumem: "20000", nvidia.com/gpucores: "40"}'
claimpod share-5g '{nvidia.com/gpumem: "5000", nvidia.com/gpucores: "20"}'
pods=(share-10g share-20g share-5g)
for p in "${pods[@]}"; do
	kubectl -n $ns wait --for=jsonpath='{.status.phase}'=Running pod/$p --timeout=120s >/dev/null
done
{
	echo "POD SCHEDULER CLAIM DEVICE CONSUMED CONTAINER-ENV"
	for p in "${pods[@]}"; do
		s=$(kubectl -n $ns get pod $p -o jsonpath='{.spec.schedulerName}')
		claim=$(kubectl -n $ns get pod $p -o jsonpath='{.status.resourceClaimStatuses[0].resourceClaimName}')
		dev=$(kubectl -n $ns get resourceclaim "$claim" -o json | jq -r '.status.allocation.devices.results[0] |
			"\(.device[0:16]) \(.consumedCapacity.memory)/\(.consumedCapacity.cores)c"')
		env=$(kubectl -n $ns logs $p | grep -E 'MEMORY_LIMIT|SM_LIMIT' | tr '\n' ' ' || true)
		echo "$p $s $claim $dev $env"
	done
} | column -t
vp=$(kubectl -n vgpud-system get pods -l app.kubernetes.io/component=node --field-selector spec.nodeName=$node -o jsonpath='{.items[0].metadata.name}')
echo
echo "== the whole cluster, claims beside the extender's pods: kubectl -n vgpud-system exec $vp -- vgpud inspect --cluster"
kubectl -n vgpud-system exec "$vp" -- vgpud inspect --cluster
