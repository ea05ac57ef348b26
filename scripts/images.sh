#!/usr/bin/env bash
# Builds the test cluster's images as OCI layout tarballs, without Docker,
# into $out (default bin/images), and prints that directory:
#   pause            registry.k8s.io/pause:3.10 (a tiny static Go program)
#   busybox          vgpud.local/busybox:1 (Debian's busybox-static)
#   cuda-like        vgpud.local/cuda-like:1 (busybox whose image config sets
#                    NVIDIA_VISIBLE_DEVICES=all, as CUDA base images do)
#   vgpud            ghcr.io/vgpud/vgpud:dev, an index of linux/amd64 and
#                    linux/arm64 (each bin/vgpud and the glibc it links)
#   vgpud-next       ghcr.io/vgpud/vgpud:next (make build-next: the stand-in
#                    for a newer release, for the rolling-upgrade scenario)
#   vgpud-prev       ghcr.io/vgpud/vgpud:$PREVIOUS_RELEASE built from that
#                    release's source, for the upgrade-from-the-previous-
#                    release scenario (which points its manifest at it)
#   kube-scheduler   registry.k8s.io/kube-scheduler at $K8S_VERSION and at
#                    v1.36.3, which manifests/vgpud.yaml names (the binaries
#                    built by k8s-binaries.sh)
# Names match what manifests/ and the cluster config use, so pods find
# them with imagePullPolicy IfNotPresent. Import with `ctr images import`,
# or push with bin/image push. `scripts/images.sh NAME` builds NAME's alone.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${VGPUD_IMAGES:-$root/bin/images}
K8S_VERSION=${K8S_VERSION:-v1.36.3}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The image tool (scripts/image, go-containerregistry): one recipe for
# these tarballs, make image and make push.
go build -o "$root/bin/image" ./scripts/image

# oci NAME ROOTFS OUT.tar Entrypoint|Cmd ARGV...: one-layer image of ROOTFS,
# its config's Env PATH and what $img_env adds (a JSON list); prints the
# name, digest and pushed size.
oci() {
	local name=$1 rootfs=$2 tarball=$3 key=$4 env=()
	shift 4
	tar -C "$rootfs" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$work/layer.tar" .
	while read -r e; do env+=(--env "$e"); done < <(jq -r '.[]' <<<"${img_env:-[]}")
	"$root/bin/image" build --layer "$work/layer.tar" --name "$name" --out "$tarball" --platform "${img_platform:-linux/$(go env GOARCH)}" \
		$([ "$key" = Entrypoint ] && echo --entrypoint) "${env[@]}" "$@" >&2
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

# With an argument, only that image: make image builds vgpud's alone.
only=${1:-}
want() { [ -z "$only" ] || [ "$only" = "$1" ]; }

if want pause; then
	r=$work/pause && mkdir -p "$r"
	CGO_ENABLED=0 go build -ldflags "-s -w" -o "$r/pause" ./scripts/images/pause
	oci registry.k8s.io/pause:3.10 "$r" "$out/pause.tar" Entrypoint /pause
fi

if want busybox; then
	r=$work/busybox && mkdir -p "$r/bin" "$r/tmp"
	cp /bin/busybox "$r/bin/busybox"
	for app in sh ash cat env echo grep ls sleep true wc head tail wget; do ln -sf busybox "$r/bin/$app"; done
	oci vgpud.local/busybox:1 "$r" "$out/busybox.tar" Cmd sh
	img_env='["NVIDIA_VISIBLE_DEVICES=all","NVIDIA_DRIVER_CAPABILITIES=compute,utility"]' oci vgpud.local/cuda-like:1 "$r" "$out/cuda-like.tar" Cmd sh
fi

# arm64_libs BIN ROOTFS: the aarch64 glibc BIN needs (its NEEDED
# libraries and its program interpreter), from Debian's cross libc.
arm64_libs() {
	local lib cross=/usr/aarch64-linux-gnu/lib
	mkdir -p "$2/lib/aarch64-linux-gnu"
	for lib in $(aarch64-linux-gnu-readelf -d "$1" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
		cp -L "$cross/$lib" "$2/lib/aarch64-linux-gnu/$lib"
	done
	lib=$(aarch64-linux-gnu-readelf -l "$1" | sed -n 's/.*program interpreter: \(.*\)\]/\1/p')
	mkdir -p "$2$(dirname "$lib")"
	cp -L "$cross/$(basename "$lib")" "$2$lib"
}

# vgpud: the cluster pulls it from its registry (scripts/cluster.sh), as
# a real cluster pulls what make push sent: one index of the host's build
# and an arm64 one, the arm64 binary checked to run from its own root
# filesystem under qemu-user.
if want vgpud; then
	[ "$(go env GOARCH)" = amd64 ] || { echo "images: vgpud's index is the host's amd64 build and an arm64 cross-build; build it on an amd64 machine" >&2; exit 1; }
	missing=()
	for tool in aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu /usr/aarch64-linux-gnu/lib/libc.so.6:libc6-dev-arm64-cross qemu-aarch64:qemu-user; do
		command -v "${tool%%:*}" >/dev/null || [ -e "${tool%%:*}" ] || missing+=("${tool#*:}")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		[ "$(id -u)" = 0 ] || { echo "images: vgpud's arm64 build needs ${missing[*]} (apt-get install them)" >&2; exit 1; }
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
	make -s build >/dev/null
	make -s build-arm64 >/dev/null
	r=$work/vgpud && mkdir -p "$r/tmp"
	with_libs "$root/bin/vgpud" "$r" /usr/bin/vgpud
	oci ghcr.io/vgpud/vgpud:dev "$r" "$work/vgpud-host.tar" Entrypoint /usr/bin/vgpud
	r=$work/vgpud-arm64 && mkdir -p "$r/tmp" "$r/usr/bin"
	cp "$root/bin/vgpud-arm64" "$r/usr/bin/vgpud"
	arm64_libs "$r/usr/bin/vgpud" "$r"
	ran=$(qemu-aarch64 -L "$r" "$r/usr/bin/vgpud" version) || { echo "images: the arm64 vgpud does not run under qemu-aarch64 from its image's files" >&2; exit 1; }
	case $ran in "vgpud "*) echo "images: arm64 under qemu-user: $ran" >&2 ;; *) echo "images: arm64 vgpud version printed '$ran'" >&2; exit 1 ;; esac
	img_platform=linux/arm64 oci ghcr.io/vgpud/vgpud:dev "$r" "$work/vgpud-arm64.tar" Entrypoint /usr/bin/vgpud
	"$root/bin/image" index --name ghcr.io/vgpud/vgpud:dev --out "$out/vgpud.tar" --from "$work/vgpud-host.tar" --from "$work/vgpud-arm64.tar" >&2
fi

if want vgpud-next; then
	make -s build-next >/dev/null
	r=$work/vgpud-next && mkdir -p "$r/tmp"
	with_libs "$root/bin/vgpud-next" "$r" /usr/bin/vgpud
	oci ghcr.io/vgpud/vgpud:next "$r" "$out/vgpud-next.tar" Entrypoint /usr/bin/vgpud
fi

# The previous release, built from its tag's source (the commit, where a
# clone has no tags).
PREVIOUS_RELEASE=${PREVIOUS_RELEASE:-v0.1.0}
PREVIOUS_COMMIT=${PREVIOUS_COMMIT:-d62b59b}
if want vgpud-prev; then
	rev=$(git -C "$root" rev-parse -q --verify "refs/tags/$PREVIOUS_RELEASE^{commit}" || git -C "$root" rev-parse -q --verify "$PREVIOUS_COMMIT^{commit}") ||
		{ echo "images: the upgrade scenario builds $PREVIOUS_RELEASE ($PREVIOUS_COMMIT) from its source, which this clone lacks: git fetch --tags (or clone without --depth)" >&2; exit 1; }
	src=$work/prev-src && mkdir -p "$src"
	git -C "$root" archive "$rev" | tar -x -C "$src"
	make -s -C "$src" build VERSION="$PREVIOUS_RELEASE" COMMIT="${rev:0:7}" >/dev/null
	r=$work/vgpud-prev && mkdir -p "$r/tmp"
	with_libs "$src/bin/vgpud" "$r" /usr/bin/vgpud
	oci "ghcr.io/vgpud/vgpud:$PREVIOUS_RELEASE" "$r" "$out/vgpud-prev.tar" Entrypoint /usr/bin/vgpud
fi

# The cluster's version, which the chart and a manifest made for the
# cluster run, and the one manifests name as they are (the previous
# release's too).
if want kube-scheduler; then
	rm -f "$out"/kube-scheduler*.tar
	for v in $(printf '%s\n' "$K8S_VERSION" v1.36.3 | sort -u); do
		kbin=$(K8S_VERSION=$v "$root/scripts/k8s-binaries.sh")
		r=$work/kube-scheduler-$v && mkdir -p "$r/tmp"
		with_libs "$kbin/kube-scheduler" "$r" /usr/local/bin/kube-scheduler
		oci "registry.k8s.io/kube-scheduler:$v" "$r" "$out/kube-scheduler-$v.tar" Entrypoint /usr/local/bin/kube-scheduler
	done
fi

echo "$out"
