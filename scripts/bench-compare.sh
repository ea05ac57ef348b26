#!/usr/bin/env bash
# Where did it go: the leader's part of make bench (VGPUD_BENCH_ONLY=leader:
# the extender against a real kube-apiserver with 1000 nodes, the
# caller's view where the commit has it, then at 0, 5000 and 20 000 placed
# pods, leader memory, binds) at each commit given, in a clone of each,
# with the leader's CPU and heap profiles, then the rows side by side and
# the heap's largest holders at each. About 3 to 4 minutes a commit. Root
# (it starts etcd and kube-apiserver).
#   scripts/bench-compare.sh b855cb4 HEAD     -> bench/compare/<commit>/
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/common.sh
need_root bench-compare
[ $# -ge 1 ] || { echo "usage: scripts/bench-compare.sh COMMIT..." >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"; "$root/scripts/apiserver.sh" down >/dev/null 2>&1 || true' EXIT
hosts_entry
revs=()
for rev in "$@"; do
	c=$(git rev-parse --short "$rev^{commit}")
	revs+=("$c")
	out=$root/bench/compare/$c
	rm -rf "$out" && mkdir -p "$out"
	git clone -q "$root" "$work/$c" && git -C "$work/$c" checkout -q "$c"
	echo "bench-compare: $c" >&2
	(
		cd "$work/$c"
		scripts/apiserver.sh down >/dev/null 2>&1 || true
		kubeconfig=$(scripts/apiserver.sh up)
		make -s build bench-floor >/dev/null
		# The leader's floor where the commit has one (80ff0f5 and later).
		floor=
		[ -x bin/leaderfloor ] && floor=$PWD/bin/leaderfloor
		KUBECONFIG=$kubeconfig VGPUD_BIN=$PWD/bin/vgpud VGPUD_NODE_FLOOR=$PWD/bin/nodefloor VGPUD_LEADER_FLOOR=$floor VGPUD_K8S_BIN=$(scripts/k8s-binaries.sh) \
			VGPUD_BENCH_OUT=$out/rows.tsv VGPUD_BENCH_PROFILES=$out VGPUD_BENCH_ONLY=leader \
			go test -tags bench -count=1 -v -timeout 25m -run 'TestAgainstAPIServer$' ./scripts/bench/ >"$out/test.log" 2>&1 ||
			echo "bench-compare: $c: the bench failed (bench/compare/$c/test.log)" >&2
		scripts/apiserver.sh down >/dev/null 2>&1 || true
		go tool pprof -sample_index=inuse_space -top -nodecount=25 bin/vgpud "$out/leader-heap.pprof" >"$out/heap.txt" 2>/dev/null || true
		go tool pprof -top -nodecount=40 bin/vgpud "$out/extender-20000.pprof" >"$out/cpu-extender-20000.txt" 2>/dev/null || true
	)
done
for c in "${revs[@]}"; do
	echo "== $c"
	cut -f2,3 "$root/bench/compare/$c/rows.tsv" | grep -E 'CPU per|RSS|floor|/filter at 20000|/bind at 20000|throughput|: filter p50'
	sed -n '5,16p' "$root/bench/compare/$c/heap.txt"
done
