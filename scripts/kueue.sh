#!/usr/bin/env bash
# Kueue on the test cluster, built from the Go module proxy like the
# cluster's other parts:
#   scripts/kueue.sh install    builds Kueue once (cached), pushes its image
#                               to the cluster's registry, applies it and
#                               waits until its webhooks answer
#   scripts/kueue.sh uninstall  removes all of it: every Job queued in it,
#                               its queues and workloads, its CRDs
#   scripts/kueue.sh manifest   prints the manifest install applies
#   scripts/kueue.sh build      builds Kueue's binary and image into the
#                               cache only: scripts/e2e.sh does it before
#                               the cluster suite, whose timeout it would
#                               otherwise spend
#   scripts/kueue.sh binary     builds the binary (cached), prints its path
# The manifest is Kueue's own kustomize bases at $KUEUE_VERSION (CRDs,
# RBAC, manager, its internal certificates, webhooks) with the settings
# in scripts/kueue/controller_manager_config.yaml, less the webhooks of
# integrations not enabled there that intercept every pod, Deployment
# or StatefulSet: a Kueue that is down must not stop the cluster's pods.
set -euo pipefail
shopt -s inherit_errexit
here=$(cd "$(dirname "$0")" && pwd)
KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/vgpud-e2e/kueue-$KUEUE_VERSION
state=${VGPUD_CLUSTER_DIR:-/var/lib/vgpud-e2e/cluster}
REGISTRY=${VGPUD_REGISTRY:-10.201.0.1:5043}
kubectl() { command kubectl --kubeconfig "${KUBECONFIG:-$state/kubeconfig}" "$@"; }

# binary builds /manager once (about 3 minutes cold) into the cache.
binary() {
	if [ ! -x "$cache/bin/kueue" ]; then
		mkdir -p "$cache/bin"
		CGO_ENABLED=0 GOBIN="$cache/bin" GOFLAGS=-mod=mod go install -ldflags="-s -w" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION" >&2
	fi
	echo "$cache/bin/kueue"
}

# image builds the OCI tarball of /manager once and prints its path.
image() {
	local bin tar=$cache/kueue.tar work
	bin=$(binary)
	(cd "$here/.." && go build -o bin/image ./scripts/image)
	if [ ! -f "$tar" ] || [ "$bin" -nt "$tar" ]; then
		work=$(mktemp -d)
		mkdir -p "$work/root/tmp"
		cp "$bin" "$work/root/manager"
		tar -C "$work/root" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$work/layer.tar" .
		"$here/../bin/image" build --layer "$work/layer.tar" --name "vgpud.local/kueue:$KUEUE_VERSION" --out "$tar.tmp" --entrypoint /manager >&2
		mv "$tar.tmp" "$tar"
		rm -rf "$work"
	fi
	echo "$tar"
}

# manifest IMAGE prints the install manifest with IMAGE.
manifest() {
	local mod work
	mod=$(cd "$here/.." && go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | jq -r .Dir)
	work=$(mktemp -d)
	cp -r "$mod/config" "$work/config"
	chmod -R u+w "$work"
	cp "$here/kueue/controller_manager_config.yaml" "$work/config/components/manager/controller_manager_config.yaml"
	mkdir "$work/config/vgpud-e2e"
	cat >"$work/config/vgpud-e2e/kustomization.yaml" <<YAML
namespace: kueue-system
namePrefix: kueue-
labels:
  - pairs: {app.kubernetes.io/name: kueue}
    includeTemplates: true
  - pairs: {control-plane: controller-manager}
    includeSelectors: true
resources:
  - ../components/crd
  - ../components/rbac
  - ../components/manager
  - ../components/internalcert
  - ../components/webhook
patches:
  - path: ../default/manager_config_patch.yaml
  - path: ../default/manager_webhook_patch.yaml
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: controller-manager, namespace: system}
      spec:
        template:
          spec:
            # The image has no user of its own; Kueue's runs as this one.
            securityContext: {runAsUser: 65532, runAsGroup: 65532}
            containers:
              - name: manager
                image: $1
                imagePullPolicy: IfNotPresent
                resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {cpu: "2", memory: 512Mi}}
  - patch: |-
      apiVersion: admissionregistration.k8s.io/v1
      kind: MutatingWebhookConfiguration
      metadata: {name: mutating-webhook-configuration}
      webhooks:
        - {name: mpod.kb.io, \$patch: delete}
        - {name: mdeployment.kb.io, \$patch: delete}
        - {name: mstatefulset.kb.io, \$patch: delete}
  - patch: |-
      apiVersion: admissionregistration.k8s.io/v1
      kind: ValidatingWebhookConfiguration
      metadata: {name: validating-webhook-configuration}
      webhooks:
        - {name: vpod.kb.io, \$patch: delete}
        - {name: vdeployment.kb.io, \$patch: delete}
        - {name: vstatefulset.kb.io, \$patch: delete}
YAML
	command kubectl kustomize --load-restrictor=LoadRestrictionsNone "$work/config/vgpud-e2e"
	rm -rf "$work"
}

case ${1:-} in
binary) binary ;;
build) image >/dev/null ;;
manifest) manifest "vgpud.local/kueue:$KUEUE_VERSION" ;;
install)
	tar=$(image)
	ref=$("$here/../bin/image" push --from "$tar" --to "$REGISTRY/kueue/kueue:$KUEUE_VERSION" --ca "$state/pki/ca.crt")
	manifest "$ref" | kubectl apply --server-side -f - >/dev/null
	# Kueue writes its webhook certificate into the Secret its pod
	# mounts, and waits for the files with a backoff that doubles; kubelet
	# shows a running pod the Secret's new content only at its next sync,
	# a minute or more later. A pod started after the Secret is filled
	# has them at once.
	if [ "$(kubectl -n kueue-system get deploy kueue-controller-manager -o jsonpath='{.status.readyReplicas}')" != 1 ]; then
		for _ in $(seq 60); do
			[ -n "$(kubectl -n kueue-system get secret kueue-webhook-server-cert -o jsonpath='{.data.tls\.crt}')" ] && break
			sleep 1
		done
		kubectl -n kueue-system delete pod -l control-plane=controller-manager --wait=false >/dev/null
	fi
	kubectl -n kueue-system rollout status deploy/kueue-controller-manager --timeout=180s >/dev/null
	# Ready once its webhooks answer: a dry-run ClusterQueue passes
	# through Kueue's own webhook.
	for _ in $(seq 120); do
		if kubectl create --dry-run=server -f - >/dev/null 2>&1 <<'YAML'; then
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: kueue-ready-probe}
spec: {namespaceSelector: {}}
YAML
			echo "kueue: $KUEUE_VERSION ready ($ref)" >&2
			exit 0
		fi
		sleep 1
	done
	echo "kueue: its webhook did not answer within 120 s" >&2
	kubectl -n kueue-system logs deploy/kueue-controller-manager --tail=30 >&2 || true
	exit 1
	;;
uninstall)
	# Kueue's webhooks first (they refuse every Job while Kueue is down),
	# then the queued Jobs, whose Workloads Kueue would make again, then
	# its objects while it runs to release their finalizers; whatever
	# still holds one after that is released by hand, so that the CRDs
	# go and a later install does not land on ones being deleted.
	kubectl delete mutatingwebhookconfiguration kueue-mutating-webhook-configuration --ignore-not-found >/dev/null || true
	kubectl delete validatingwebhookconfiguration kueue-validating-webhook-configuration --ignore-not-found >/dev/null || true
	if kubectl get crd workloads.kueue.x-k8s.io >/dev/null 2>&1; then
		kubectl delete jobs -A -l kueue.x-k8s.io/queue-name --timeout=60s >/dev/null 2>&1 || true
		for kind in workloads localqueues clusterqueues resourceflavors; do
			kubectl delete "$kind.kueue.x-k8s.io" --all -A --timeout=30s >/dev/null 2>&1 || true
			left=$(kubectl get "$kind.kueue.x-k8s.io" -A -o jsonpath='{range .items[*]}{.metadata.namespace}{" "}{.metadata.name}{"\n"}{end}' 2>/dev/null) || left=""
			while read -r ns name; do
				[ -n "$ns" ] || continue
				[ -n "$name" ] || { name=$ns; ns=""; }
				kubectl ${ns:+-n "$ns"} patch "$kind.kueue.x-k8s.io" "$name" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
			done <<<"$left"
		done
	fi
	m=$(manifest "vgpud.local/kueue:$KUEUE_VERSION") || { echo "kueue: cannot render its manifest to remove it" >&2; exit 1; }
	kubectl delete --ignore-not-found --wait=false -f - <<<"$m" >/dev/null || true
	# Gone before it returns: an install onto a namespace or CRDs still
	# being deleted would lose what it applied.
	kubectl wait --for=delete namespace/kueue-system --timeout=120s >/dev/null 2>&1 || true
	for _ in $(seq 60); do
		if crds=$(kubectl get crd -o name 2>/dev/null) && [[ $crds != *.kueue.x-k8s.io* ]]; then
			exit 0
		fi
		sleep 1
	done
	echo "kueue: its CRDs are still being deleted after 60 s" >&2
	exit 1
	;;
*)
	echo "usage: scripts/kueue.sh install|uninstall|manifest|build|binary" >&2
	exit 2
	;;
esac
