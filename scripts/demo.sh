#!/usr/bin/env bash
# The main job: a real one-node cluster with mock GPUs (scripts/cluster.sh),
# vgpud installed from manifests/ (mock overlay), and sample workloads
# placed by vgpud: pods sharing one GPU with different memory, a whole-GPU
# pod, a two-GPU pod, and one that cannot fit. Prints where each landed and
# what its container sees, `vgpud inspect`, and why the last one waits.
# The cluster stays up afterwards: eval "$(scripts/cluster.sh env)" to use
# kubectl on it, scripts/cluster.sh down to stop it.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD/scripts
. "$here/common.sh"
need_root demo

kubeconfig=$("$here/cluster.sh" up)
export KUBECONFIG=$kubeconfig
"$here/install.sh"

ns=vgpud-demo
kubectl delete namespace $ns --ignore-not-found --wait >/dev/null
kubectl create namespace $ns >/dev/null

pod() { # pod NAME GPU-POLICY LIMITS-JSON
	kubectl -n $ns apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  annotations: {vgpud.io/gpu-policy: $2}
spec:
  restartPolicy: Never
  containers:
    - name: main
      image: vgpud.local/busybox:1
      command: [sh, -c, "env | grep -E '^(NVIDIA_VISIBLE_DEVICES|CUDA_)' | sort; sleep 3600"]
      resources: {limits: $3}
YAML
}
echo "== sample workloads"
# binpack puts the three sharing pods on one GPU; the rest spread.
pod share-10g binpack '{nvidia.com/gpumem: "10000", nvidia.com/gpucores: "30"}'
pod share-20g binpack '{nvidia.com/gpumem: "20000", nvidia.com/gpucores: "40"}'
pod share-5g binpack '{nvidia.com/gpumem: "5000", nvidia.com/gpucores: "20"}'
pod whole-gpu spread '{nvidia.com/gpu: "1"}'
pod two-gpus spread '{nvidia.com/gpu: "2", nvidia.com/gpumem: "8000", nvidia.com/gpucores: "25"}'
pod too-big spread '{nvidia.com/gpumem: "60000"}'
for p in share-10g share-20g share-5g whole-gpu two-gpus; do
	kubectl -n $ns wait --for=jsonpath='{.status.phase}'=Running pod/$p --timeout=120s >/dev/null
done

echo
echo "== where each pod landed (vgpud.io/assignment) and what its container sees"
gpus=$(kubectl get node "$(kubectl -n $ns get pod share-10g -o jsonpath='{.spec.nodeName}')" -o jsonpath='{.metadata.annotations.vgpud\.io/gpus}')
{
	echo "POD SCHEDULER GPU MiB CORES CONTAINER-ENV"
	for p in share-10g share-20g share-5g whole-gpu two-gpus; do
		a=$(kubectl -n $ns get pod $p -o jsonpath='{.metadata.annotations.vgpud\.io/assignment}')
		s=$(kubectl -n $ns get pod $p -o jsonpath='{.spec.schedulerName}')
		env=$(kubectl -n $ns logs $p | grep -E 'MEMORY_LIMIT|SM_LIMIT' | tr '\n' ' ')
		jq -r --arg p "$p" --arg s "$s" --arg env "$env" --argjson inv "$gpus" '.containers[] | .gpus[] as $g |
			($inv.gpus[] | select(.uuid == $g.uuid) | .index) as $i |
			"\($p) \($s) \($i):\($g.uuid[0:12]) \($g.memoryMiB) \($g.cores) \($env)"' <<<"$a"
	done
} | column -t

echo
echo "== kubectl -n vgpud-system exec ds/vgpud -- vgpud inspect"
kubectl -n vgpud-system exec ds/vgpud -- vgpud inspect

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
echo "The cluster is still up: eval \"\$($here/cluster.sh env)\"; kubectl -n $ns get pods. Stop it with $here/cluster.sh down."
