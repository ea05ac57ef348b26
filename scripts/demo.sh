#!/usr/bin/env bash
# The main job: a real cluster of three nodes (VGPUD_NODES, default 3) with
# mock GPUs (scripts/cluster.sh), vgpud installed from manifests/ (mock
# overlay: two nodes of eight A100s, one of four L4s), and sample
# workloads placed by vgpud: pods sharing one GPU with different memory
# (binpack, the default), a whole-GPU pod and a two-GPU pod spread over the
# nodes, a pod asking for an L4, and one that cannot fit. Prints where each
# landed and what its container sees, `vgpud inspect` on every node, and
# why the last one waits; then the same sharing pods as DRA claims on one
# node moved to DRA mode (scripts/demo-dra.sh).
# The cluster stays up afterwards: eval "$(scripts/cluster.sh env)" to use
# kubectl on it, scripts/cluster.sh down to stop it.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD/scripts
. "$here/common.sh"
need_root demo

kubeconfig=$("$here/cluster.sh" up)
export KUBECONFIG=$kubeconfig
# A cluster left up by an earlier demo has a node in DRA mode.
"$here/demo-dra.sh" reset
"$here/install.sh"
# No node was set up by hand: each vgpud pod's init container set its
# node's containerd up (docs/install-node-setup.md); and each replica
# labels its node with what it serves (docs/install.md, "Node labels").
kubectl get nodes -L vgpud.io/node-setup,vgpud.io/gpu.product,vgpud.io/gpu.count,vgpud.io/gpu.memory,vgpud.io/mig.mode

ns=vgpud-demo
kubectl delete namespace $ns --ignore-not-found --wait >/dev/null
kubectl create namespace $ns >/dev/null

pod() { # pod NAME ANNOTATIONS-JSON LIMITS-JSON
	kubectl -n $ns apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  annotations: $2
spec:
  restartPolicy: Never
  containers:
    - name: main
      image: vgpud.local/busybox:1
      command: [sh, -c, "env | grep -E '^(NVIDIA_VISIBLE_DEVICES|CUDA_)' | sort; sleep 3600"]
      resources: {limits: $3}
YAML
}
echo "== sample workloads on $(kubectl get nodes -o name | wc -l) node(s)"
# Binpack, the default node policy and the sharing pods' GPU policy, puts
# the three sharing pods (which ask for an A100 by GPU type: together they
# outgrow an L4) on one GPU of one node; spread sends its pods to the
# emptiest nodes and GPUs; the L4 pod asks for the L4 node.
binpack='{nvidia.com/use-gputype: A100, vgpud.io/gpu-policy: binpack}'
spread='{vgpud.io/node-policy: spread, vgpud.io/gpu-policy: spread}'
pod share-10g "$binpack" '{nvidia.com/gpumem: "10000", nvidia.com/gpucores: "30"}'
pod share-20g "$binpack" '{nvidia.com/gpumem: "20000", nvidia.com/gpucores: "40"}'
pod share-5g "$binpack" '{nvidia.com/gpumem: "5000", nvidia.com/gpucores: "20"}'
pod whole-gpu "$spread" '{nvidia.com/gpu: "1"}'
pod two-gpus "$spread" '{nvidia.com/gpu: "2", nvidia.com/gpumem: "8000", nvidia.com/gpucores: "25"}'
placed=(share-10g share-20g share-5g whole-gpu two-gpus)
if kubectl get node vgpud-node-3 >/dev/null 2>&1; then
	pod on-l4 '{nvidia.com/use-gputype: L4}' '{nvidia.com/gpumem: "12000", nvidia.com/gpucores: "50"}'
	placed+=(on-l4)
fi
pod too-big "$spread" '{nvidia.com/gpumem: "60000"}'
for p in "${placed[@]}"; do
	kubectl -n $ns wait --for=jsonpath='{.status.phase}'=Running pod/$p --timeout=120s >/dev/null
done

echo
echo "== where each pod landed (vgpud.io/assignment) and what its container sees"
{
	echo "POD NODE SCHEDULER GPU MODEL MiB CORES CONTAINER-ENV"
	for p in "${placed[@]}"; do
		a=$(kubectl -n $ns get pod $p -o jsonpath='{.metadata.annotations.vgpud\.io/assignment}')
		s=$(kubectl -n $ns get pod $p -o jsonpath='{.spec.schedulerName}')
		node=$(kubectl -n $ns get pod $p -o jsonpath='{.spec.nodeName}')
		gpus=$(kubectl get node "$node" -o jsonpath='{.metadata.annotations.vgpud\.io/gpus}')
		env=$(kubectl -n $ns logs $p | grep -E 'MEMORY_LIMIT|SM_LIMIT' | tr '\n' ' ')
		jq -r --arg p "$p" --arg n "$node" --arg s "$s" --arg env "$env" --argjson inv "$gpus" '.containers[] | .gpus[] as $g |
			($inv.gpus[] | select(.uuid == $g.uuid)) as $i |
			"\($p) \($n) \($s) \($i.index):\($g.uuid[0:12]) \($i.model | gsub(" "; "-")) \($g.memoryMiB) \($g.cores) \($env)"' <<<"$a"
	done
} | column -t

for node in $(kubectl get nodes -o jsonpath='{.items[*].metadata.name}'); do
	vp=$(kubectl -n vgpud-system get pods -l app.kubernetes.io/component=node --field-selector spec.nodeName="$node" -o jsonpath='{.items[0].metadata.name}')
	echo
	echo "== $node: kubectl -n vgpud-system exec $vp -- vgpud inspect"
	kubectl -n vgpud-system exec "$vp" -- vgpud inspect
done

echo
echo "== the pod that cannot fit stays Pending; its events say why, per node"
for _ in $(seq 1 30); do
	msg=$(kubectl -n $ns get events --field-selector involvedObject.name=too-big -o jsonpath='{range .items[*]}{.reason}: {.message}{"\n"}{end}')
	[ -n "$msg" ] && break
	sleep 1
done
kubectl -n $ns get pod too-big
echo "$msg"
echo
echo "== the whole cluster as vgpud books it: kubectl -n vgpud-system exec $vp -- vgpud inspect --cluster"
kubectl -n vgpud-system exec "$vp" -- vgpud inspect --cluster
"$here/demo-dra.sh"
echo
echo "The cluster is still up: eval \"\$($here/cluster.sh env)\"; kubectl -n $ns get pods. Stop it with $here/cluster.sh down."
