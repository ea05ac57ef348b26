#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
# kube-proxy at $K8S_VERSION from the Go module proxy, once, and prints the
# directory that holds them. k8s.io/kubernetes cannot be `go install`ed (its
# go.mod replaces the staging modules with local paths), so a throwaway
# module pins each staging module to the matching v0.x release.
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-v1.36.3}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/vgpud-e2e
bin=$cache/k8s-$K8S_VERSION/bin
cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

have=1
for c in "${cmds[@]}"; do [ -x "$bin/$c" ] || have=0; done
if [ $have = 1 ]; then echo "$bin"; exit 0; fi

staging=v0.${K8S_VERSION#v1.}
mod=$cache/k8s-$K8S_VERSION/module
mkdir -p "$mod" "$bin"
cd "$mod"
gomodproxy=$(go env GOPROXY | cut -d, -f1)
curl -fsSL "$gomodproxy/k8s.io/kubernetes/@v/$K8S_VERSION.mod" -o kubernetes.mod
{
	echo "module vgpud-e2e/k8s"
	echo
	echo "go 1.26"
	echo
	echo "require k8s.io/kubernetes $K8S_VERSION"
	echo
	grep '=> ./staging' kubernetes.mod | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
} >go.mod
{
	echo "//go:build tools"
	echo
	echo "package tools"
	echo
	echo "import ("
	for c in "${cmds[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
	echo ")"
} >tools.go
echo "building Kubernetes $K8S_VERSION (about 4 minutes cold on 2 cores)" >&2
go mod tidy >&2
minor=${K8S_VERSION#v1.}
minor=${minor%%.*}
pkgs=()
for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
go build -o "$bin/" -ldflags "-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" "${pkgs[@]}" >&2
echo "$bin"
