#!/usr/bin/env bash
# Builds Helm at $HELM_VERSION from the Go module proxy, once, and prints
# its path: charts/vgpud is linted and rendered with it in make test, as
# the Kubernetes binaries are built for the cluster.
set -euo pipefail
HELM_VERSION=${HELM_VERSION:-v3.22.0}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/vgpud-e2e
bin=$cache/helm-$HELM_VERSION
if [ -x "$bin/helm" ]; then echo "$bin/helm"; exit 0; fi
mkdir -p "$bin"
echo "building Helm $HELM_VERSION (about 3 minutes cold on 2 cores)" >&2
# Helm's version is set the way its own Makefile sets it.
GOBIN=$bin go install -ldflags "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
echo "$bin/helm"
