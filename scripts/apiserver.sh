#!/usr/bin/env bash
# etcd and kube-apiserver alone, on loopback: enough for the cluster role,
# its webhook and the extender benchmarks (no kubelet, no network namespace).
#   scripts/apiserver.sh up     start (idempotent); prints the kubeconfig path
#   scripts/apiserver.sh down   stop by recorded PIDs
# VGPUD_K8S_BIN names a folder holding kube-apiserver (else
# scripts/k8s-binaries.sh builds it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
run=${VGPUD_APISERVER_DIR:-/var/lib/vgpud-e2e/apiserver}
port=${VGPUD_APISERVER_PORT:-6443}

up() {
	local missing=()
	for tool in etcd:etcd-server openssl:openssl curl:curl; do
		command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
	bin=${VGPUD_K8S_BIN:-$("$here/k8s-binaries.sh")}
	mkdir -p "$run/pki" "$run/etcd" "$run/log"
	if [ -f "$run/apiserver.pid" ] && kill -0 "$(cat "$run/apiserver.pid")" 2>/dev/null; then
		echo "$run/kubeconfig"
		return
	fi
	cd "$run/pki"
	if [ ! -f apiserver.crt ]; then
		openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=vgpud-e2e-ca -keyout ca.key -out ca.crt 2>/dev/null
		openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout apiserver.key -out apiserver.csr 2>/dev/null
		printf 'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' >san.ext
		openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -extfile san.ext -out apiserver.crt 2>/dev/null
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		echo "$(openssl rand -hex 16),admin,admin,system:masters" >tokens.csv
	fi
	token=$(cut -d, -f1 tokens.csv)
	cat >"$run/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://127.0.0.1:$port", certificate-authority: "$run/pki/ca.crt"}}]
users: [{name: admin, user: {token: "$token"}}]
contexts: [{name: local, context: {cluster: local, user: admin}}]
current-context: local
KC
	setsid etcd --data-dir "$run/etcd" --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 >"$run/log/etcd.log" 2>&1 </dev/null &
	echo $! >"$run/etcd.pid"
	setsid "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
		--secure-port "$port" --tls-cert-file "$run/pki/apiserver.crt" --tls-private-key-file "$run/pki/apiserver.key" \
		--client-ca-file "$run/pki/ca.crt" --token-auth-file "$run/pki/tokens.csv" --authorization-mode RBAC \
		--service-account-key-file "$run/pki/sa.pub" --service-account-signing-key-file "$run/pki/sa.key" \
		--service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.0.0.0/24 \
		--max-requests-inflight 2000 --max-mutating-requests-inflight 1000 \
		>"$run/log/kube-apiserver.log" 2>&1 </dev/null &
	echo $! >"$run/apiserver.pid"
	for _ in $(seq 1 120); do
		if curl -fsS --cacert "$run/pki/ca.crt" -H "Authorization: Bearer $token" "https://127.0.0.1:$port/readyz" >/dev/null 2>&1; then
			echo "$run/kubeconfig"
			return
		fi
		sleep 0.5
	done
	echo "kube-apiserver not ready after 60 s; see $run/log/" >&2
	tail -20 "$run/log/kube-apiserver.log" >&2
	exit 1
}

down() {
	for p in apiserver etcd; do
		f=$run/$p.pid
		[ -f "$f" ] || continue
		pid=$(cat "$f")
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
		rm -f "$f"
	done
	rm -rf "$run/etcd"
}

case "${1:-}" in
up) up ;;
down) down ;;
*) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
