# Sourced by the scripts that run vgpud against the local kube-apiserver.

# need_root exits unless root: they install packages and start etcd.
need_root() {
	[ "$(id -u)" = 0 ] || { echo "$1: run as root (it installs packages and starts etcd/kube-apiserver)" >&2; exit 2; }
}

# hosts_entry maps the name on vgpud's serving certificate to loopback, so
# kube-apiserver reaches the leader there with TLS verified as usual.
hosts_entry() {
	grep -qE '^127\.0\.0\.1[[:space:]]+vgpud\.vgpud-system\.svc$' /etc/hosts || echo "127.0.0.1 vgpud.vgpud-system.svc" >>/etc/hosts
}

# gotest runs a suite verbosely and, when one fails, prints the failed
# tests' own output again at the end: CI shows only a run's last lines,
# and the cluster suite's scenarios run long.
gotest() {
	go tool gotestsum --format standard-verbose --hide-summary skipped -- "$@" 2>&1 |
		grep -vE '^I[0-9]{4} ' # klog chatter from client-go in the test process
}
