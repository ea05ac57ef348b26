#!/usr/bin/env bash
# Installs vgpud on the local cluster with the mock overlay, its image
# pulled from the cluster's registry by digest, and waits until it
# serves: DaemonSet ready, a leader labelled, the webhook's caBundle set,
# every node advertising nvidia.com/gpu, and the vgpud-scheduler ready.
# Expects KUBECONFIG (scripts/cluster.sh up).
#
# VGPUD_INSTALL says how, as docs/install.md does it on a real cluster:
#   manifest (default)  kubectl apply of manifests/vgpud.yaml (through
#                       manifests/mock), pinned and made for the cluster's
#                       version as make manifests pins and makes it
#   chart               helm upgrade --install of charts/vgpud, the overlay
#                       applied by a post-renderer (scripts/mock-post-render.sh),
#                       and the nodes' runtime paths by values, for the
#                       removal hook, which Helm 3 does not post-render
# VGPUD_FULLNAME (chart only) installs every object under that name
# (fullnameOverride) rather than vgpud.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s%N)
# vgpud's image as scripts/cluster.sh pushed it to the cluster's registry,
# pinned to the digest the registry holds for its tag.
state=${VGPUD_CLUSTER_DIR:-/var/lib/vgpud-e2e/cluster}
pushed=$(cat "$state/vgpud-image")
name=${VGPUD_FULLNAME:-vgpud}
[ "$name" = vgpud ] || [ "${VGPUD_INSTALL:-manifest}" = chart ] || { echo "install: VGPUD_FULLNAME=$name needs VGPUD_INSTALL=chart" >&2; exit 2; }
case ${VGPUD_INSTALL:-manifest} in
manifest)
	# Made for the cluster's version, as make manifests KUBERNETES=... makes it.
	kubectl kustomize --load-restrictor=LoadRestrictionsNone manifests/mock |
		bin/image pin --image "${pushed%@*}" --ca "$state/pki/ca.crt" \
			--kubernetes "$(kubectl version -o json | jq -r .serverVersion.gitVersion)" >"$state/vgpud.yaml"
	grep -qF "image: $pushed" "$state/vgpud.yaml" || { echo "install: the manifest does not name the image pushed, $pushed" >&2; exit 1; }
	# Removal's first step, pinned alike (docs/install-upgrade-and-uninstall.md).
	kubectl kustomize --load-restrictor=LoadRestrictionsNone manifests/mock/node-revert |
		bin/image pin --image "${pushed%@*}" --ca "$state/pki/ca.crt" >"$state/node-revert.yaml"
	kubectl apply -f "$state/vgpud.yaml" >/dev/null
	;;
chart)
	helm=$(scripts/helm.sh)
	repo=${pushed%@*}
	repo=${repo%:*}
	"$helm" upgrade --install vgpud charts/vgpud --namespace vgpud-system --create-namespace \
		--set image.repository="$repo" --set image.digest="${pushed#*@}" \
		--set runtime.configDir=/run/vgpud-e2e/etc/containerd --set runtime.socket=/run/vgpud-e2e/run/containerd/containerd.sock \
		--set fullnameOverride="$name" --post-renderer scripts/mock-post-render.sh >/dev/null
	image=$(kubectl -n vgpud-system get ds "$name" -o jsonpath='{.spec.template.spec.containers[0].image}')
	[ "$image" = "$repo@${pushed#*@}" ] || { echo "install: the chart installed $image, not the image pushed, $pushed" >&2; exit 1; }
	;;
*)
	echo "install: VGPUD_INSTALL=${VGPUD_INSTALL}: want manifest or chart" >&2
	exit 2
	;;
esac
kubectl -n vgpud-system rollout status "ds/$name" --timeout=180s >/dev/null
kubectl -n vgpud-system rollout status "deploy/$name-scheduler" --timeout=180s >/dev/null
for _ in $(seq 1 120); do
	leader=$(kubectl -n vgpud-system get pods -l vgpud.io/role=leader -o name)
	ca=$(kubectl get mutatingwebhookconfiguration "$name" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')
	# The fewest any node advertises: 0 until every node's plugin serves.
	gpus=$(kubectl get nodes -o jsonpath='{range .items[*]}{.status.allocatable.nvidia\.com/gpu}{"\n"}{end}' | awk '{n = $1 + 0; if (NR == 1 || n < m) m = n} END {print m + 0}')
	[ -n "$leader" ] && [ -n "$ca" ] && [ "${gpus:-0}" -gt 0 ] && break
	sleep 0.5
done
[ -n "$leader" ] && [ -n "$ca" ] && [ "${gpus:-0}" -gt 0 ] || { echo "install: vgpud did not come up (leader '$leader', caBundle ${#ca} bytes, nvidia.com/gpu '$gpus')" >&2; exit 1; }
echo "install (${VGPUD_INSTALL:-manifest}): vgpud serving in $((($(date +%s%N) - start) / 1000000)) ms (leader $leader; every node advertises nvidia.com/gpu, at least $gpus)" >&2
