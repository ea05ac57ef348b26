#!/usr/bin/env bash
# Helm post-renderer for clusters without GPUs: reads what Helm rendered
# from charts/vgpud on stdin and writes it with manifests/mock's overlay
# (the same Component manifests/mock applies to manifests/vgpud.yaml).
#   helm install ... --post-renderer scripts/mock-post-render.sh
set -euo pipefail
overlay=$(cd "$(dirname "$0")/../manifests/mock/overlay" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/rendered.yaml"
# kustomize takes a component by a relative path only.
cp -r "$overlay" "$dir/overlay"
# The overlay patches vgpud's objects by name: under fullnameOverride
# (VGPUD_FULLNAME, scripts/install.sh) theirs.
name=${VGPUD_FULLNAME:-vgpud}
if [ "$name" != vgpud ]; then
	sed -i -e "s/{name: vgpud, namespace:/{name: $name, namespace:/" -e "s/{name: vgpud-scheduler, namespace:/{name: $name-scheduler, namespace:/" \
		-e "s/\[vgpud\.vgpud-system\.svc\]/[$name.vgpud-system.svc]/" "$dir/overlay/kustomization.yaml"
fi
cat >"$dir/kustomization.yaml" <<EOK
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [rendered.yaml]
components: [overlay]
EOK
kubectl kustomize --load-restrictor=LoadRestrictionsNone "$dir"
