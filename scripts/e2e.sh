#!/usr/bin/env bash
# The real-apiserver suite: a fresh etcd + kube-apiserver on loopback,
# vgpud's cluster role as separate processes, tests in scripts/e2e.
# Needs root (packages, /etc/hosts, /var/lib). Exit status is the tests'.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD/scripts
[ "$(id -u)" = 0 ] || { echo "e2e: run as root (it installs packages and starts etcd/kube-apiserver)" >&2; exit 2; }

# The webhook's serving certificate names the Service; this name leads the
# apiserver's call to the leader on loopback, with TLS verified as usual.
grep -qE '^127\.0\.0\.1[[:space:]]+vgpud\.vgpud-system\.svc$' /etc/hosts || echo "127.0.0.1 vgpud.vgpud-system.svc" >>/etc/hosts

"$here/apiserver.sh" down
trap '"$here/apiserver.sh" down' EXIT
start=$(date +%s.%N)
kubeconfig=$("$here/apiserver.sh" up)
echo "e2e: etcd + kube-apiserver ready in $(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)") s"

go build -o bin/vgpud .
KUBECONFIG=$kubeconfig VGPUD_BIN=$PWD/bin/vgpud go test -tags e2e -count=1 -v -timeout 10m ./scripts/e2e/ 2>&1 |
	grep -vE '^I[0-9]{4} ' # klog chatter from client-go in the test process
