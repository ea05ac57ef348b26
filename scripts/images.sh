#!/usr/bin/env bash
# Builds the test cluster's images as OCI layout tarballs, without Docker,
# into $out (default bin/images), and prints that directory:
#   pause            registry.k8s.io/pause:3.10 (a tiny static Go program)
#   busybox          vgpud.local/busybox:1 (Debian's busybox-static)
#   cuda-like        vgpud.local/cuda-like:1 (busybox whose image config sets
#                    NVIDIA_VISIBLE_DEVICES=all, as CUDA base images do)
#   vgpud            ghcr.io/vgpud/vgpud:dev (bin/vgpud and the glibc it links)
#   kube-scheduler   registry.k8s.io/kube-scheduler:v1.36.3 (the binary built by k8s-binaries.sh)
# Names match what manifests/ and the cluster config use, so pods find
# them with imagePullPolicy IfNotPresent. Import with `ctr images import`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${VGPUD_IMAGES:-$root/bin/images}
K8S_VERSION=${K8S_VERSION:-v1.36.3}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# blob FILE: stores FILE under blobs/sha256 of the layout in $lay; prints "digest size".
blob() {
	local d s
	d=$(sha256sum "$1" | cut -d' ' -f1)
	s=$(stat -c %s "$1")
	cp "$1" "$lay/blobs/sha256/$d"
	echo "$d $s"
}

# oci NAME ROOTFS OUT.tar Entrypoint|Cmd ARGV...: one-layer image of ROOTFS,
# its config's Env PATH and what $img_env adds (a JSON list).
oci() {
	local name=$1 rootfs=$2 tarball=$3 key=$4
	shift 4
	lay=$work/layout-$(basename "$tarball" .tar)
	rm -rf "$lay"
	mkdir -p "$lay/blobs/sha256"
	tar -C "$rootfs" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$work/layer.tar" .
	read -r ld ls < <(blob "$work/layer.tar")
	jq -cn --arg diff "sha256:$ld" --arg key "$key" --argjson env "${img_env:-[]}" --args '{architecture:"amd64",os:"linux",
		config:({Env:(["PATH=/usr/local/bin:/usr/bin:/bin"] + $env)} + {($key):$ARGS.positional}),
		rootfs:{type:"layers",diff_ids:[$diff]}}' "$@" >"$work/config.json"
	read -r cd cs < <(blob "$work/config.json")
	jq -cn --arg cd "sha256:$cd" --argjson cs "$cs" --arg ld "sha256:$ld" --argjson ls "$ls" '{schemaVersion:2,
		mediaType:"application/vnd.oci.image.manifest.v1+json",
		config:{mediaType:"application/vnd.oci.image.config.v1+json",digest:$cd,size:$cs},
		layers:[{mediaType:"application/vnd.oci.image.layer.v1.tar",digest:$ld,size:$ls}]}' >"$work/manifest.json"
	read -r md ms < <(blob "$work/manifest.json")
	jq -cn --arg md "sha256:$md" --argjson ms "$ms" --arg name "$name" '{schemaVersion:2,
		manifests:[{mediaType:"application/vnd.oci.image.manifest.v1+json",digest:$md,size:$ms,
		annotations:{"io.containerd.image.name":$name}}]}' >"$lay/index.json"
	echo '{"imageLayoutVersion":"1.0.0"}' >"$lay/oci-layout"
	tar -C "$lay" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$tarball" .
}

# with_libs BIN ROOTFS DEST: copies BIN to ROOTFS/DEST with the shared
# libraries ldd lists (go-nvml needs cgo, so vgpud links glibc).
with_libs() {
	mkdir -p "$2$(dirname "$3")"
	cp "$1" "$2$3"
	ldd "$1" | grep -oE '/[^ ]+' | while read -r lib; do
		mkdir -p "$2$(dirname "$lib")"
		cp -L "$lib" "$2$lib"
	done
}

# pause
r=$work/pause && mkdir -p "$r"
CGO_ENABLED=0 go build -ldflags "-s -w" -o "$r/pause" ./scripts/images/pause
oci registry.k8s.io/pause:3.10 "$r" "$out/pause.tar" Entrypoint /pause

# busybox
r=$work/busybox && mkdir -p "$r/bin" "$r/tmp"
cp /bin/busybox "$r/bin/busybox"
for app in sh ash cat env echo grep ls sleep true wc head tail wget; do ln -sf busybox "$r/bin/$app"; done
oci vgpud.local/busybox:1 "$r" "$out/busybox.tar" Cmd sh
img_env='["NVIDIA_VISIBLE_DEVICES=all","NVIDIA_DRIVER_CAPABILITIES=compute,utility"]' oci vgpud.local/cuda-like:1 "$r" "$out/cuda-like.tar" Cmd sh

# vgpud
make -s build >/dev/null
r=$work/vgpud && mkdir -p "$r/tmp"
with_libs "$root/bin/vgpud" "$r" /usr/bin/vgpud
oci ghcr.io/vgpud/vgpud:dev "$r" "$out/vgpud.tar" Entrypoint /usr/bin/vgpud

# kube-scheduler
kbin=$("$root/scripts/k8s-binaries.sh")
r=$work/kube-scheduler && mkdir -p "$r/tmp"
with_libs "$kbin/kube-scheduler" "$r" /usr/local/bin/kube-scheduler
oci "registry.k8s.io/kube-scheduler:$K8S_VERSION" "$r" "$out/kube-scheduler.tar" Entrypoint /usr/local/bin/kube-scheduler

echo "$out"
