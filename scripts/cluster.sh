#!/usr/bin/env bash
# A real one-node Kubernetes cluster on this machine, inside a network
# namespace: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# containerd + runc + bridge CNI, kubelet and kube-proxy (facts behind it:
# ../shared/E2E-RECIPE.md).
#   scripts/cluster.sh up     start (idempotent); prints the kubeconfig path
#   scripts/cluster.sh down   stop every process by its recorded PID, remove pods' state
#   scripts/cluster.sh restart-kubelet
#   scripts/cluster.sh env    print `export KUBECONFIG=...`
# The node is $NODE at $NODE_IP on a veth inside netns $NETNS; the host end
# of the veth is $HOST_IP, so kubectl on the host reaches the apiserver.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
NETNS=${VGPUD_NETNS:-vgpud-e2e}
NODE=${VGPUD_NODE:-vgpud-node}
NODE_IP=10.201.0.2
HOST_IP=10.201.0.1
SERVICE_CIDR=10.96.0.0/16
POD_CIDR=10.88.0.0/16
state=${VGPUD_CLUSTER_DIR:-/var/lib/vgpud-e2e/cluster}
rund=/run/vgpud-e2e
pki=$state/pki
logs=$state/log
K8S_VERSION=${K8S_VERSION:-v1.36.3}
procs=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy)

# in NAME CMD...: start CMD in the namespace, detached, its PID in $state/NAME.pid.
in_ns() {
	local name=$1
	shift
	nsenter --net=/var/run/netns/$NETNS setsid "$@" >"$logs/$name.log" 2>&1 </dev/null &
	echo $! >"$state/$name.pid"
}

running() { [ -f "$state/$1.pid" ] && kill -0 "$(cat "$state/$1.pid")" 2>/dev/null; }

packages() {
	local missing=()
	for tool in etcd:etcd-server containerd:containerd runc:runc iptables:iptables jq:jq openssl:openssl curl:curl conntrack:conntrack; do
		command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
	done
	[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
	[ -x /bin/busybox ] || missing+=(busybox-static)
	if [ ${#missing[@]} -gt 0 ]; then
		echo "cluster: installing ${missing[*]}" >&2
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
}

network() {
	[ -e /var/run/netns/$NETNS ] || ip netns add $NETNS
	if ! ip link show vgpud0h >/dev/null 2>&1; then
		ip link add vgpud0h type veth peer name vgpud0 netns $NETNS
		ip addr add $HOST_IP/24 dev vgpud0h
	fi
	ip link set vgpud0h up
	local n="nsenter --net=/var/run/netns/$NETNS"
	$n ip link set lo up
	$n ip addr show dev vgpud0 | grep -q "$NODE_IP/" || $n ip addr add $NODE_IP/24 dev vgpud0
	$n ip link set vgpud0 up
	$n ip route show default | grep -q . || $n ip route add default via $HOST_IP dev vgpud0
	# Pod-to-Service-to-pod on one bridge needs bridged packets in iptables.
	$n sysctl -qw net.ipv4.ip_forward=1
	$n sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
}

certs() {
	mkdir -p "$pki"
	cd "$pki"
	[ -f ca.crt ] && return
	openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=vgpud-e2e-ca -keyout ca.key -out ca.crt 2>/dev/null
	sign() { # sign NAME SUBJECT [SAN]
		openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
		if [ -n "${3:-}" ]; then printf 'subjectAltName=%s\n' "$3" >"$1.ext"; else : >"$1.ext"; fi
		openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
	}
	sign apiserver /CN=kube-apiserver "IP:$NODE_IP,IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
	sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
	sign kubelet "/CN=$NODE" "IP:$NODE_IP,DNS:$NODE"
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	echo "$(openssl rand -hex 16),admin,admin,system:masters" >tokens.csv
}

kubeconfig() {
	local token
	token=$(cut -d, -f1 "$pki/tokens.csv")
	cat >"$state/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: vgpud-e2e, cluster: {server: "https://$NODE_IP:6443", certificate-authority: "$pki/ca.crt"}}]
users: [{name: admin, user: {token: "$token"}}]
contexts: [{name: vgpud-e2e, context: {cluster: vgpud-e2e, user: admin}}]
current-context: vgpud-e2e
KC
}

configs() {
	mkdir -p "$state/cni" "$state/containerd"
	cat >"$state/runc-wrapper" <<'SH'
#!/bin/sh
# runc cannot write oom_score_adj on this VM: drop it from the bundle on create.
prev=""
for a in "$@"; do
	if [ "$prev" = "--bundle" ] || [ "$prev" = "-b" ]; then bundle=$a; fi
	prev=$a
done
case " $* " in *" create "*)
	b=${bundle:-.}
	if [ -f "$b/config.json" ]; then
		sed -i -E 's/,"oomScoreAdj":-?[0-9]+//; s/"oomScoreAdj":-?[0-9]+,?//' "$b/config.json"
	fi ;;
esac
exec runc "$@"
SH
	chmod +x "$state/runc-wrapper"
	cat >"$state/containerd/config.toml" <<TOML
version = 2
root = "$state/containerd/root"
state = "$rund/containerd"
[grpc]
  address = "$rund/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$state/runc-wrapper"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$state/cni"
TOML
	cat >"$state/cni/10-vgpud-e2e.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "vgpud-e2e", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
	cat >"$state/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$rund/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
tlsCertFile: $pki/kubelet.crt
tlsPrivateKeyFile: $pki/kubelet.key
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
YAML
	cat >"$state/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE
clientConnection: {kubeconfig: $state/kubeconfig}
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
}

wait_for() { # wait_for SECONDS WHAT CMD...
	local t=$1 what=$2
	shift 2
	for _ in $(seq 1 $((t * 2))); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.5
	done
	echo "cluster: $what not ready after ${t}s; logs in $logs" >&2
	return 1
}

up() {
	need_root cluster
	packages
	local bin images start
	start=$(date +%s)
	bin=$("$here/k8s-binaries.sh")
	images=$("$here/images.sh")
	mkdir -p "$state" "$logs" "$rund"
	network
	certs
	kubeconfig
	configs
	local kc=$state/kubeconfig k="kubectl --kubeconfig $state/kubeconfig"
	running etcd || in_ns etcd etcd --data-dir "$state/etcd" --listen-client-urls http://127.0.0.1:2379 \
		--advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380
	running kube-apiserver || in_ns kube-apiserver "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
		--bind-address 0.0.0.0 --advertise-address $NODE_IP --secure-port 6443 \
		--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
		--client-ca-file "$pki/ca.crt" --token-auth-file "$pki/tokens.csv" --authorization-mode Node,RBAC \
		--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
		--service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range $SERVICE_CIDR \
		--kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types InternalIP --allow-privileged=true \
		--max-requests-inflight 2000 --max-mutating-requests-inflight 1000
	wait_for 90 kube-apiserver $k get --raw /readyz
	running kube-controller-manager || in_ns kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$kc" \
		--controllers='*,-nodeipam' --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
		--leader-elect=false --use-service-account-credentials=false
	running kube-scheduler || in_ns kube-scheduler "$bin/kube-scheduler" --kubeconfig "$kc" --leader-elect=false
	running containerd || in_ns containerd containerd --config "$state/containerd/config.toml"
	wait_for 30 containerd ctr -a "$rund/containerd.sock" version
	for img in "$images"/*.tar; do
		ctr -a "$rund/containerd.sock" -n k8s.io images import --no-unpack=false "$img" >/dev/null
	done
	running kubelet || start_kubelet "$bin"
	running kube-proxy || in_ns kube-proxy "$bin/kube-proxy" --config "$state/kube-proxy.yaml"
	# kubelet exits when containerd's CRI is not initialized yet (ctr
	# answers a moment before it): start it again while the node comes up.
	wait_for 120 "node $NODE" sh -c "$k get node $NODE -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True || { $0 kubelet-alive; false; }"
	wait_for 60 "default service account" $k -n default get serviceaccount default
	echo "cluster: up in $(($(date +%s) - start)) s (node $NODE at $NODE_IP)" >&2
	echo "$kc"
}

start_kubelet() {
	in_ns kubelet "$1/kubelet" --config "$state/kubelet.yaml" --kubeconfig "$state/kubeconfig" \
		--node-ip $NODE_IP --hostname-override $NODE
}

# restart_kubelet stops kubelet by its PID and starts it again, as an
# operator's restart or an upgrade would; pods keep running.
restart_kubelet() {
	stop kubelet
	start_kubelet "$("$here/k8s-binaries.sh")"
}

stop() {
	local f=$state/$1.pid pid
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$f"
}

down() {
	local i
	# Pods' processes outlive kubelet and containerd in their shims: kill
	# them through containerd first, while it still answers.
	if running containerd; then
		stop kubelet
		local c="ctr -a $rund/containerd.sock -n k8s.io"
		for task in $($c tasks ls -q 2>/dev/null); do $c tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true; done
		sleep 1
		for task in $($c tasks ls -q 2>/dev/null); do $c tasks delete -f "$task" >/dev/null 2>&1 || true; done
		for ctr in $($c containers ls -q 2>/dev/null); do $c containers delete "$ctr" >/dev/null 2>&1 || true; done
	fi
	for ((i = ${#procs[@]} - 1; i >= 0; i--)); do stop "${procs[$i]}"; done
	# Pod sandboxes' network namespaces and the bridge go with a fresh netns.
	ip netns del $NETNS 2>/dev/null || true
	ip link del vgpud0h 2>/dev/null || true
	# Secret and emptyDir volumes are mounts under kubelet's pod directory.
	awk '$2 ~ "^/var/lib/kubelet/pods/" {print $2}' /proc/mounts | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
	rm -rf "$state/etcd" /var/lib/kubelet/pods
}

case "${1:-}" in
up) up ;;
down) down ;;
restart-kubelet) restart_kubelet ;;
kubelet-alive) running kubelet || start_kubelet "$("$here/k8s-binaries.sh")" ;;
env) echo "export KUBECONFIG=$state/kubeconfig" ;;
*) echo "usage: $0 up|down|restart-kubelet|env" >&2; exit 2 ;;
esac
