#!/usr/bin/env bash
# Node-only memory on a GPU machine: vgpud's node role on the 8-GPU mock and
# on the driver, next to the floor program (scripts/bench/nodefloor) without
# and with NVML, each started afresh RUNS times (default 2) and read 5 s in,
# then again 5 s after it handed its binary's start-up pages back
# (internal/exepages: vgpud 30 s after it starts, the floor after 10 s).
# Needs etcd, openssl, curl, the NVIDIA driver, VGPUD_BIN and
# VGPUD_NODE_FLOOR (make build bench-floor), and kube-apiserver in
# VGPUD_K8S_BIN (else scripts/k8s-binaries.sh builds it).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-2}
run=${VGPUD_APISERVER_DIR:-/var/lib/vgpud-e2e/apiserver}
tmp=$(mktemp -d)
pid=
# Stops the apiserver this script started (or found running) too.
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; "$here/apiserver.sh" down; rm -rf "$tmp"' EXIT
kubeconfig=$("$here/apiserver.sh" up)
token=$(cut -d, -f1 "$run/pki/tokens.csv")
# The node role publishes its inventory on its Node (409: made earlier).
code=$(curl -sS -o "$tmp/out" -w '%{http_code}' --cacert "$run/pki/ca.crt" -H "Authorization: Bearer $token" \
	-H 'Content-Type: application/json' -d '{"metadata":{"name":"rss-node"}}' "https://127.0.0.1:${VGPUD_APISERVER_PORT:-6443}/api/v1/nodes")
case $code in
201 | 409) ;;
*) echo "create Node rss-node: HTTP $code: $(cat "$tmp/out")" >&2; exit 1 ;;
esac
mkdir -p "$tmp/dp"

node() {
	exec "$VGPUD_BIN" run --roles=node --gpu-backend="$1" --node-name=rss-node --kubeconfig="$kubeconfig" \
		--device-plugin-dir="$tmp/dp" --inspect-socket="$tmp/inspect.sock" --pod-resources-socket= --metrics-listen=
}

# rss prints the memory of $pid.
rss() { awk '/^(VmRSS|RssAnon|RssFile):/ {printf "%s %.1f MiB  ", $1, $2 / 1024}' "/proc/$pid/status"; }

# measure LABEL READY RELEASED COMMAND...: start the command RUNS times and
# print its RSS once its output says READY (the node role found its GPUs),
# and again 5 s after it says RELEASED (its start-up pages handed back).
measure() {
	local label=$1 ready=$2 released=$3 i s
	shift 3
	for i in $(seq "$runs"); do
		"$@" >"$tmp/out" 2>&1 &
		pid=$!
		sleep 5
		if ! kill -0 "$pid" 2>/dev/null || ! grep -q "$ready" "$tmp/out"; then
			echo "$label: not ready after 5 s:" >&2
			cat "$tmp/out" >&2
			exit 1
		fi
		echo "$label, run $i, at start-up: $(rss)"
		for s in $(seq 60); do
			grep -q "$released" "$tmp/out" && break
			sleep 1
		done
		if ! grep -q "$released" "$tmp/out"; then
			echo "$label: start-up pages not handed back within a minute:" >&2
			cat "$tmp/out" >&2
			exit 1
		fi
		sleep 5
		echo "$label, run $i, 5 s after it handed its start-up pages back: $(rss)"
		kill -TERM "$pid"
		wait "$pid" || true
		pid=
	done
}

measure "vgpud node-only, mock:dgxa100" "node role serving" "handed the binary's start-up pages back" node mock:dgxa100
measure "vgpud node-only, nvml" "node role serving" "handed the binary's start-up pages back" node nvml
measure "floor" ready released "$VGPUD_NODE_FLOOR"
measure "floor --nvml" ready released "$VGPUD_NODE_FLOOR" --nvml
