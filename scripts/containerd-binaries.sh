#!/usr/bin/env bash
# Builds containerd, its runc shim and ctr at $CONTAINERD_VERSION from the
# Go module proxy, once, and prints the directory that holds them. The
# project's cluster runs this containerd (NRI on, CDI) in place of
# Debian's 1.6, which has no NRI.
set -euo pipefail
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/vgpud-e2e
bin=$cache/containerd-$CONTAINERD_VERSION/bin
cmds=(containerd containerd-shim-runc-v2 ctr)

have=1
for c in "${cmds[@]}"; do [ -x "$bin/$c" ] || have=0; done
if [ $have = 1 ]; then echo "$bin"; exit 0; fi

mkdir -p "$bin"
echo "building containerd $CONTAINERD_VERSION (about 2 minutes cold on 2 cores)" >&2
pkgs=()
for c in "${cmds[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/$c@$CONTAINERD_VERSION"); done
# no_btrfs: Debian's btrfs headers are not installed, and the cluster's
# snapshotter is overlayfs.
(cd "$cache" && GOBIN=$bin GOFLAGS=-mod=mod go install -tags no_btrfs "${pkgs[@]}") >&2
echo "$bin"
