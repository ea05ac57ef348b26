#!/usr/bin/env bash
# A real Kubernetes cluster of VGPUD_NODES nodes (default 3) on this
# machine: etcd, kube-apiserver, kube-controller-manager and kube-scheduler
# in node 1's network namespace; every node has its own network namespace
# and IP, containerd + runc + bridge CNI, kubelet and kube-proxy
# (docs/development.md describes it).
#   scripts/cluster.sh up     start (idempotent); prints the kubeconfig path
#   scripts/cluster.sh down   stop every process by its recorded PID, remove pods' state
#   scripts/cluster.sh restart-kubelet [K]   restart node K's kubelet (default 1)
#   scripts/cluster.sh kubelet-log [K]       print node K's kubelet log, across its restarts
#   scripts/cluster.sh env    print `export KUBECONFIG=...`
# Each node runs containerd 2.x built from the Go module proxy
# (scripts/containerd-binaries.sh) with NRI on, its own NRI socket and
# CDI directories, and the NRI validator requiring vgpud's hook;
# VGPUD_CONTAINERD=1.6 runs Debian's containerd 1.6 instead (no NRI), for
# the fallback scenario.
# Images: vgpud is pushed to a registry on the host (Debian's
# docker-registry at 10.201.0.1:5043, TLS from the cluster CA) that every
# node's containerd trusts (certs.d), and pulled from it by tag and
# digest; the rest (pause, busybox, kube-scheduler) are imported.
# Every node is labelled nvidia.com/gpu.present=true, as GPU feature
# discovery labels a GPU node, so the DaemonSet's own node affinity applies.
# Node k is vgpud-node (k=1) or vgpud-node-k, at 10.201.0.(k+1) on a veth
# in netns vgpud-e2e(-k), bridged on the host (10.201.0.1), with pod CIDR
# 10.88.(32(k-1)).0/19 routed between the nodes. Nodes after the first
# run kubelet and containerd in their own mount namespace, where per-node
# directories are /var/lib/kubelet (the DaemonSet's hostPaths) and the pod
# logs, and their own cgroup root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
NODES=${VGPUD_NODES:-3}
NODE=vgpud-node
NODE_IP=10.201.0.2
HOST_IP=10.201.0.1
# Debian's docker-registry on the host's bridge address: the nodes pull
# vgpud from it by tag and digest (scripts/install.sh pins it). Not 5000,
# where the package's own service listens on every address once systemd
# starts it.
REGISTRY=$HOST_IP:5043
VGPUD_IMAGE=$REGISTRY/vgpud/vgpud:dev
BRIDGE=vgpud-br0
SERVICE_CIDR=10.96.0.0/16
POD_CIDR=10.88.0.0/16
state=${VGPUD_CLUSTER_DIR:-/var/lib/vgpud-e2e/cluster}
rund=/run/vgpud-e2e
pki=$state/pki
logs=$state/log
K8S_VERSION=${K8S_VERSION:-v1.36.3}
CONTAINERD=${VGPUD_CONTAINERD:-2}
# The annotation with which a pod may start while vgpud's NRI hook is not
# connected: vgpud's own pods, which must start first. Admission lets
# only vgpud's namespace use it (manifests/vgpud.yaml).
HOOK_OPTIONAL=vgpud.io/runtime-hook-optional
# Where every node sees its own containerd configuration, as a node sees
# /etc/containerd: a bind of its etc-containerd directory, in its mount
# namespace (node 1's in the host's). vgpud's runtime check mounts it.
RUNTIME_ETC=$rund/etc/containerd
# And its containerd's socket directory, as a node's /run/containerd: a
# bind of its sock directory. vgpud's node setup stops the containerd
# serving it, which its supervisor (supervise.sh, as systemd's
# Restart=always) starts again.
RUNTIME_RUN=$rund/run/containerd
control=(etcd kube-apiserver kube-controller-manager kube-scheduler)
per_node=(containerd kubelet kube-proxy)

# node_vars K sets what names node K: its name, IP, netns, pod CIDR, the
# suffix of its process and file names, and its directories.
node_vars() {
	local k=$1
	n_k=$k
	n_ip=10.201.0.$((k + 1))
	n_cidr=10.88.$((32 * (k - 1))).0/19
	if [ "$k" = 1 ]; then
		n_name=$NODE n_ns=${VGPUD_NETNS:-vgpud-e2e} n_sfx="" n_dir=$state n_run=$rund
	else
		n_name=$NODE-$k n_ns=${VGPUD_NETNS:-vgpud-e2e}-$k n_sfx=-$k n_dir=$state/node$k n_run=$rund/node$k
	fi
	n_mnt=$rund/mnt/node$k # mount namespace (nodes after the first)
}

# in NAME NS CMD...: start CMD in netns NS (and node K's mount namespace,
# when $in_mnt is set), detached, its PID in $state/NAME.pid.
in_ns() {
	local name=$1 ns=$2
	shift 2
	local enter=(nsenter --net=/var/run/netns/$ns)
	[ -n "${in_mnt:-}" ] && enter+=(--mount=$in_mnt)
	"${enter[@]}" setsid "$@" >"$logs/$name.log" 2>&1 </dev/null &
	echo $! >"$state/$name.pid"
}

running() { [ -f "$state/$1.pid" ] && kill -0 "$(cat "$state/$1.pid")" 2>/dev/null; }

# containerd_bin prints the directory of the containerd that nodes run
# ("" for Debian's, on PATH).
containerd_bin() {
	if [ "$CONTAINERD" = 1.6 ]; then echo ""; else "$here/containerd-binaries.sh"; fi
}

# ctr_ K ARGS... runs the ctr matching node K's containerd, on its socket.
ctr_() {
	node_vars "$1"
	shift
	local b
	b=$(containerd_bin)
	"${b:+$b/}ctr" -a "$n_run/sock/containerd.sock" "$@"
}

packages() {
	local missing=()
	for tool in etcd:etcd-server docker-registry:docker-registry prometheus:prometheus containerd:containerd runc:runc iptables:iptables jq:jq openssl:openssl curl:curl conntrack:conntrack; do
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
	if ! ip link show $BRIDGE >/dev/null 2>&1; then
		ip link add $BRIDGE type bridge
		ip addr add $HOST_IP/24 dev $BRIDGE
	fi
	ip link set $BRIDGE up
	local k
	for k in $(seq 1 "$NODES"); do
		node_vars "$k"
		local host_end=vgpud${k}h n="nsenter --net=/var/run/netns/$n_ns"
		[ -e /var/run/netns/$n_ns ] || ip netns add $n_ns
		if ! ip link show $host_end >/dev/null 2>&1; then
			ip link add $host_end type veth peer name vgpud0 netns $n_ns
			ip link set $host_end master $BRIDGE
		fi
		ip link set $host_end up
		$n ip link set lo up
		# (ip complains about dead pod netns names it cannot resolve: harmless)
		$n ip addr show dev vgpud0 2>/dev/null | grep -q "$n_ip/" || $n ip addr add $n_ip/24 dev vgpud0
		$n ip link set vgpud0 up
		$n ip route show default | grep -q . || $n ip route add default via $HOST_IP dev vgpud0
		# Pod-to-Service-to-pod on one bridge needs bridged packets in iptables.
		$n sysctl -qw net.ipv4.ip_forward=1
		$n sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
	done
	# Every node, and the host, reaches each node's pods through that node.
	local j
	for j in $(seq 1 "$NODES"); do
		node_vars "$j"
		local via=$n_ip cidr=$n_cidr
		ip route replace $cidr via $via
		for k in $(seq 1 "$NODES"); do
			[ "$k" = "$j" ] && continue
			node_vars "$k"
			nsenter --net=/var/run/netns/$n_ns ip route replace $cidr via $via
		done
	done
}

# mount_ns K gives node K (after the first) a mount namespace of its own,
# where its directory is /var/lib/kubelet.
mount_ns() {
	node_vars "$1"
	mkdir -p "$RUNTIME_ETC" "$RUNTIME_RUN" "$n_run/sock"
	if [ "$1" = 1 ]; then
		mountpoint -q "$RUNTIME_ETC" || mount --bind "$n_dir/etc-containerd" "$RUNTIME_ETC"
		mountpoint -q "$RUNTIME_RUN" || mount --bind "$n_run/sock" "$RUNTIME_RUN"
		return
	fi
	mkdir -p "$rund/mnt"
	if ! mountpoint -q "$rund/mnt"; then
		mount --bind "$rund/mnt" "$rund/mnt"
		mount --make-private "$rund/mnt"
	fi
	if ! nsenter --mount="$n_mnt" true 2>/dev/null; then
		touch "$n_mnt"
		unshare --mount="$n_mnt" --propagation private true
		# kubelet's log GC removes the pod log directories of pods it does
		# not run, so the nodes cannot share /var/log/pods either.
		# Nor NRI's socket, nor CDI's spec directories: each node's
		# containerd has its own.
		local d
		for d in /var/lib/kubelet /var/log/pods /var/log/containers /run/nri /etc/cdi /run/cdi; do
			mkdir -p "$n_dir$d" "$d"
			nsenter --mount="$n_mnt" mount --bind "$n_dir$d" "$d"
		done
		nsenter --mount="$n_mnt" mount --bind "$n_dir/etc-containerd" "$RUNTIME_ETC"
		nsenter --mount="$n_mnt" mount --bind "$n_run/sock" "$RUNTIME_RUN"
	fi
}

# sign NAME SUBJECT [SAN]: a certificate from the cluster CA, in $pki.
sign() {
	(
		cd "$pki"
		openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
		if [ -n "${3:-}" ]; then printf 'subjectAltName=%s\n' "$3" >"$1.ext"; else : >"$1.ext"; fi
		openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
	)
}

certs() {
	mkdir -p "$pki"
	if [ ! -f "$pki/ca.crt" ]; then
		(cd "$pki" && openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=vgpud-e2e-ca -keyout ca.key -out ca.crt 2>/dev/null)
		sign apiserver /CN=kube-apiserver "IP:$NODE_IP,IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
		sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
		(cd "$pki" && openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null)
		echo "$(openssl rand -hex 16),admin,admin,system:masters" >"$pki/tokens.csv"
	fi
	local k
	for k in $(seq 1 "$NODES"); do
		node_vars "$k"
		[ -f "$pki/kubelet$n_sfx.crt" ] || sign "kubelet$n_sfx" "/CN=$n_name" "IP:$n_ip,DNS:$n_name"
	done
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
	node_vars "$1"
	local d=$n_dir
	mkdir -p "$d/cni" "$d/containerd" "$d/etc-containerd" "$n_run"
	cat >"$d/runc-wrapper" <<'SH'
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
	chmod +x "$d/runc-wrapper"
	if [ "$CONTAINERD" = 1.6 ]; then
		cat >"$d/etc-containerd/config.toml" <<TOML
version = 2
root = "$d/containerd/root"
state = "$n_run/containerd"
[grpc]
  address = "$n_run/sock/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$d/containerd/certs.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$d/runc-wrapper"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$d/cni"
TOML
	else
		# As a node comes: containerd's own defaults (NRI on, at each
		# node's own /run/nri), without vgpud's drop-in, which vgpud's
		# DaemonSet puts in place itself (its node-setup init container)
		# and restarts containerd for. The import is relative to
		# config.toml, so that it resolves the same in vgpud's container,
		# where RUNTIME_ETC is mounted; node-setup finds it covers the
		# drop-in and keeps it.
		# (Node 1's directory outlives the cluster: a drop-in an earlier
		# one left goes.)
		running containerd$n_sfx || rm -f "$d/etc-containerd/conf.d/vgpud.toml"
		cat >"$d/etc-containerd/config.toml" <<TOML
version = 3
root = "$d/containerd/root"
state = "$n_run/containerd"
imports = ["conf.d/*.toml"]
[grpc]
  address = "$n_run/sock/containerd.sock"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "registry.k8s.io/pause:3.10"
[plugins."io.containerd.cri.v1.images".registry]
  config_path = "$d/containerd/certs.d"
[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = "$d/runc-wrapper"
      SystemdCgroup = false
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "$d/cni"
TOML
	fi
	# The cluster's registry, trusted through the cluster CA, as a node
	# trusts a private registry.
	mkdir -p "$d/containerd/certs.d/$REGISTRY"
	cat >"$d/containerd/certs.d/$REGISTRY/hosts.toml" <<TOML
server = "https://$REGISTRY"
[host."https://$REGISTRY"]
  capabilities = ["pull", "resolve"]
  ca = "$pki/ca.crt"
TOML
	cat >"$d/cni/10-vgpud-e2e.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "vgpud-e2e", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$d/cni-ipam", "ranges": [[{"subnet": "$n_cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
	cat >"$d/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$n_run/sock/containerd.sock
cgroupRoot: "$([ "$n_k" = 1 ] && echo / || echo /$n_name)"
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
tlsCertFile: $pki/kubelet$n_sfx.crt
tlsPrivateKeyFile: $pki/kubelet$n_sfx.key
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
YAML
	cat >"$d/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $n_name
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
	local bin images start k
	start=$(date +%s)
	bin=$("$here/k8s-binaries.sh")
	images=$("$here/images.sh")
	mkdir -p "$state" "$logs" "$rund"
	# CDI specs an aborted e2e run left on the host's first node.
	rm -f /etc/cdi/vgpud-e2e-*.yaml /var/run/cdi/vgpud-e2e-*.yaml
	network
	certs
	kubeconfig
	for k in $(seq 1 "$NODES"); do configs "$k"; done
	local kc=$state/kubeconfig k8s="kubectl --kubeconfig $state/kubeconfig" ns1
	node_vars 1
	ns1=$n_ns
	running etcd || in_ns etcd $ns1 etcd --data-dir "$state/etcd" --listen-client-urls http://127.0.0.1:2379 \
		--advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380
	running kube-apiserver || start_apiserver "$bin"
	wait_for 90 kube-apiserver $k8s get --raw /readyz
	running kube-controller-manager || in_ns kube-controller-manager $ns1 "$bin/kube-controller-manager" --kubeconfig "$kc" \
		--controllers='*,-nodeipam' --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
		--leader-elect=false --use-service-account-credentials=false
	running kube-scheduler || in_ns kube-scheduler $ns1 "$bin/kube-scheduler" --kubeconfig "$kc" --leader-elect=false
	registry "$images/vgpud.tar"
	for k in $(seq 1 "$NODES"); do start_node "$k" "$bin" "$images"; done
	for k in $(seq 1 "$NODES"); do
		node_vars "$k"
		# kubelet exits when containerd's CRI is not initialized yet (ctr
		# answers a moment before it): start it again while the node comes up.
		wait_for 120 "node $n_name" sh -c "$k8s get node $n_name -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True || { $0 kubelet-alive $k; false; }"
	done
	wait_for 60 "default service account" $k8s -n default get serviceaccount default
	echo "cluster: up in $(($(date +%s) - start)) s ($NODES node(s): $NODE at $NODE_IP$([ "$NODES" -gt 1 ] && echo ", ..."))" >&2
	echo "$kc"
}

# registry VGPUD.tar starts the cluster's registry (TLS, a certificate
# from the cluster CA) and pushes vgpud's image to it as $VGPUD_IMAGE;
# $state/vgpud-image names it, pinned by digest, for scripts/install.sh.
registry() {
	[ -f "$pki/registry.crt" ] || sign registry /CN=vgpud-e2e-registry "IP:$HOST_IP"
	cat >"$state/registry.yml" <<YAML
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $state/registry}, delete: {enabled: true}}
http: {addr: "$REGISTRY", tls: {certificate: $pki/registry.crt, key: $pki/registry.key}}
YAML
	if ! running registry; then
		setsid docker-registry serve "$state/registry.yml" >"$logs/registry.log" 2>&1 </dev/null &
		echo $! >"$state/registry.pid"
	fi
	wait_for 30 registry curl -sf --cacert "$pki/ca.crt" "https://$REGISTRY/v2/"
	"$here/../bin/image" push --from "$1" --to "$VGPUD_IMAGE" --ca "$pki/ca.crt" >"$state/vgpud-image"
	echo "cluster: pushed $(cat "$state/vgpud-image")" >&2
}

# start_node K BIN IMAGES starts node K's containerd (with the images),
# kubelet and kube-proxy.
start_node() {
	local k=$1 bin=$2 images=$3 in_mnt=""
	mount_ns "$k"
	node_vars "$k"
	[ "$k" = 1 ] || in_mnt=$n_mnt
	local cb
	cb=$(containerd_bin)
	# The shim is found on PATH, beside the containerd that starts it.
	running containerd$n_sfx || PATH=${cb:+$cb:}$PATH in_ns containerd$n_sfx $n_ns "$here/supervise.sh" "${cb:+$cb/}containerd" --config "$n_dir/etc-containerd/config.toml"
	wait_for 30 "containerd of $n_name" ctr_ "$k" version
	local img
	for img in "$images"/*.tar; do
		# vgpud comes from the registry, the rest as the nodes' own images.
		[ "$(basename "$img")" = vgpud.tar ] && continue
		ctr_ "$k" -n k8s.io images import --no-unpack=false "$img" >/dev/null
	done
	running kubelet$n_sfx || start_kubelet "$k" "$bin"
	running kube-proxy$n_sfx || in_mnt="" in_ns kube-proxy$n_sfx $n_ns "$bin/kube-proxy" --config "$n_dir/kube-proxy.yaml"
}

start_kubelet() {
	local k=$1 in_mnt="" h
	node_vars "$k"
	if [ "$k" != 1 ]; then
		in_mnt=$n_mnt
		# Its own cgroup root, which kubelet wants to exist in every hierarchy.
		for h in /sys/fs/cgroup/*/; do mkdir -p "$h$n_name" 2>/dev/null || true; done
	fi
	in_ns kubelet$n_sfx $n_ns "$2/kubelet" --config "$n_dir/kubelet.yaml" --kubeconfig "$state/kubeconfig" \
		--node-ip $n_ip --hostname-override $n_name --node-labels nvidia.com/gpu.present=true
}

# start_apiserver BIN starts kube-apiserver in node 1's network namespace.
start_apiserver() {
	local in_mnt=
	node_vars 1
	in_ns kube-apiserver $n_ns "$1/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
		--bind-address 0.0.0.0 --advertise-address $NODE_IP --secure-port 6443 \
		--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
		--client-ca-file "$pki/ca.crt" --token-auth-file "$pki/tokens.csv" --authorization-mode Node,RBAC \
		--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
		--service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range $SERVICE_CIDR \
		--kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types InternalIP --allow-privileged=true \
		--max-requests-inflight 2000 --max-mutating-requests-inflight 1000
}

# restart_apiserver stops kube-apiserver and starts it again, as an
# operator must after removing vgpud and before installing it again:
# kube-apiserver loses a built-in paramKind for good once no binding
# names it (kubernetes/kubernetes#130887; docs/install-upgrade-and-uninstall.md, Uninstall).
restart_apiserver() {
	stop kube-apiserver
	[ -f "$logs/kube-apiserver.log" ] && mv "$logs/kube-apiserver.log" "$logs/kube-apiserver.log.$(date +%s%N)"
	start_apiserver "$("$here/k8s-binaries.sh")"
	wait_for 90 kube-apiserver kubectl --kubeconfig "$state/kubeconfig" get --raw /readyz
}

# restart_containerd K stops node K's containerd and starts it again, as
# an operator's `systemctl restart containerd`: the containers' shims and
# so the containers keep running.
restart_containerd() {
	local k=${1:-1} in_mnt="" cb
	node_vars "$k"
	[ "$k" = 1 ] || in_mnt=$n_mnt
	stop containerd$n_sfx
	[ -f "$logs/containerd$n_sfx.log" ] && mv "$logs/containerd$n_sfx.log" "$logs/containerd$n_sfx.log.$(date +%s%N)"
	cb=$(containerd_bin)
	PATH=${cb:+$cb:}$PATH in_ns containerd$n_sfx $n_ns "$here/supervise.sh" "${cb:+$cb/}containerd" --config "$n_dir/etc-containerd/config.toml"
	wait_for 30 "containerd of $n_name" ctr_ "$k" version
}

# vgpud_bin prints the path of this clone's vgpud, built if missing.
vgpud_bin() {
	local vgpud=$here/../bin/vgpud
	[ -x "$vgpud" ] || (cd "$here/.." && go build -o bin/vgpud .) >&2
	echo "$vgpud"
}

# node_setup K remove|install takes vgpud's drop-in out of node K's
# containerd imports or puts it back, as docs/install.md says, and
# restarts containerd.
node_setup() {
	node_vars "$1"
	case ${2:-} in
	remove | install) ;;
	*) echo "cluster: node-setup K remove|install" >&2; return 2 ;;
	esac
	# The documented step itself: vgpud node-setup, as root on the node,
	# then the restart it asks for.
	"$(vgpud_bin)" node-setup --runtime-config "containerd:$n_dir/etc-containerd/config.toml" "$2" >&2
	restart_containerd "$1"
}

# restart_kubelet stops node K's kubelet by its PID and starts it again, as
# an operator's restart or an upgrade would; pods keep running.
restart_kubelet() {
	local k=${1:-1}
	node_vars "$k"
	stop kubelet$n_sfx
	# The old kubelet's log stays beside the new one (kubelet-log K).
	[ -f "$logs/kubelet$n_sfx.log" ] && mv "$logs/kubelet$n_sfx.log" "$logs/kubelet$n_sfx.log.$(date +%s%N)"
	start_kubelet "$k" "$("$here/k8s-binaries.sh")"
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
	local k i
	# Every node ever started, whatever VGPUD_NODES says now.
	local nodes=1
	for k in $(seq 2 9); do [ -e /var/run/netns/${VGPUD_NETNS:-vgpud-e2e}-$k ] || [ -f "$state/kubelet-$k.pid" ] && nodes=$k; done
	for k in $(seq "$nodes" -1 1); do
		node_vars "$k"
		# Pods' processes outlive kubelet and containerd in their shims:
		# kill them through containerd first, while it still answers.
		if running containerd$n_sfx; then
			stop kubelet$n_sfx
			local c="ctr_ $k -n k8s.io"
			for task in $($c tasks ls -q 2>/dev/null); do $c tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true; done
			sleep 1
			for task in $($c tasks ls -q 2>/dev/null); do $c tasks delete -f "$task" >/dev/null 2>&1 || true; done
			for ctr in $($c containers ls -q 2>/dev/null); do $c containers delete "$ctr" >/dev/null 2>&1 || true; done
			node_vars "$k"
		fi
		for i in kube-proxy kubelet containerd; do stop $i$n_sfx; done
		# Pod sandboxes' network namespaces and the bridge go with a fresh netns.
		ip netns del $n_ns 2>/dev/null || true
		ip link del vgpud${k}h 2>/dev/null || true
		ip route del $n_cidr 2>/dev/null || true
		if [ "$k" != 1 ]; then
			# The node's mounts go with its mount namespace.
			umount "$n_mnt" 2>/dev/null || true
			rm -rf "$n_dir"
			local h
			for h in /sys/fs/cgroup/*/; do
				[ -d "$h$n_name" ] && find "$h$n_name" -depth -type d -exec rmdir {} + 2>/dev/null || true
			done
		fi
	done
	for ((i = ${#control[@]} - 1; i >= 0; i--)); do stop "${control[$i]}"; done
	stop registry
	rm -rf "$state/registry" "$state/vgpud-image"
	ip link del $BRIDGE 2>/dev/null || true
	ip link del vgpud0h 2>/dev/null || true # the one-node layout before the bridge
	# Secret and emptyDir volumes are mounts under kubelet's pod directory;
	# node 1's pod sandboxes' /dev/shm are under containerd's state, which
	# containerd unmounts only when a sandbox is removed through CRI, not
	# by ctr above.
	awk -v d="$rund/containerd/" 'index($2, "/var/lib/kubelet/pods/") == 1 || index($2, d) == 1 {print $2}' /proc/mounts |
		sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
	rm -rf "$state/etcd" /var/lib/kubelet/pods
	# What vgpud's node role keeps on the host (its usage record, the
	# mock GPU's process list) belongs to this cluster's processes only.
	rm -f /var/lib/vgpud/gpu-usage-*.json /var/lib/vgpud/mock-processes-*.json
	# And what a node serving DRA claims prepared, with node 1's kubelet's
	# record of it (the host's /var/lib/kubelet): a claim of this cluster
	# named in the next would keep its pods from starting.
	rm -f /var/lib/vgpud/dra-*.json /var/run/cdi/vgpud-claim-*.json /var/lib/kubelet/dra_manager_state
	umount "$RUNTIME_ETC" 2>/dev/null || true
	umount "$RUNTIME_RUN" 2>/dev/null || true
	rm -f /run/nri/nri.sock # node 1's containerd 2.x; a 1.6 node must find none
	rm -f "$logs"/kubelet*.log.* # the logs of kubelets before a restart
	# Pod netns of nodes after the first were mounts in their mount
	# namespace, gone with it; what is left in the host's view is a name.
	local f
	for f in /var/run/netns/cni-*; do
		[ -e "$f" ] && ! mountpoint -q "$f" && rm -f "$f"
	done
	return 0
}

case "${1:-}" in
up) up ;;
down) down ;;
restart-kubelet) restart_kubelet "${2:-1}" ;;
restart-apiserver) restart_apiserver ;;
node-setup) node_setup "${2:-1}" "${3:-}" ;;
kubelet-alive)
	node_vars "${2:-1}"
	running kubelet$n_sfx || start_kubelet "${2:-1}" "$("$here/k8s-binaries.sh")"
	;;
kubelet-log)
	# Node K's kubelet log, the ones before its restarts first.
	node_vars "${2:-1}"
	cat $(ls "$logs/kubelet$n_sfx.log".* 2>/dev/null | sort) "$logs/kubelet$n_sfx.log"
	;;
env) echo "export KUBECONFIG=$state/kubeconfig" ;;
*) echo "usage: $0 up|down|restart-kubelet [K]|kubelet-log [K]|env" >&2; exit 2 ;;
esac
