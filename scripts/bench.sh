#!/usr/bin/env bash
# make bench: every benchmark of the project, one table, written to
# bench/results.md with the machine, date and commit. Medians of repeated
# runs; comparisons come from one run with both sides measured.
#   1. Go benchmarks (-count 5): the pure core, the extender in process,
#      admission in process, Allocate with 1000 pods.
#   2. Against a real kube-apiserver (scripts/apiserver.sh) with 1000 Node
#      objects: the caller's view (2000 pods filtered and bound by one
#      client, beside HAMi's recorded numbers), the extender over HTTPS at
#      0/5000/20000 placed pods, bind throughput, leader memory next to a
#      floor program's, the webhook's cost per request (paired creates,
#      beside a do-nothing webhook's), the whole pipeline through a real
#      kube-scheduler; the node-only daemon's memory next to its floor's.
#   3. On a one-node cluster (scripts/cluster.sh): 30 GPU pods to Running
#      next to 30 plain pods, and a freed GPU to the pod waiting for it,
#      three times each.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD/scripts
. "$here/common.sh"
need_root bench
started=$(date +%s)
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
row() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$rows"; }

# medians FILE: "name<TAB>unit<TAB>median" for every benchmark metric.
medians() {
	awk '/^Benchmark/ { name = $1; sub(/-[0-9]+$/, "", name)
		for (i = 3; i < NF; i += 2) { k = name "\t" $(i+1); n[k]++; v[k, n[k]] = $i } }
	END { for (k in n) { c = n[k]; for (i = 1; i <= c; i++) a[i] = v[k, i]
		for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		print k "\t" a[int((c + 1) / 2)] } }' "$1"
}
get() { awk -F'\t' -v n="$2" -v u="$3" '$1 == n && $2 == u { print $3 }' "$1"; }

echo "bench: Go benchmarks (5 runs each)" >&2
gob=$(mktemp)
go test -run '^$' -bench . -benchmem -count 5 ./cluster/internal/fit ./cluster/internal/extender ./cluster/internal/books ./webhook ./node/internal/deviceplugin ./node/internal/usage 2>/dev/null | grep '^Benchmark' >"$gob"
med=$(mktemp)
medians "$gob" >"$med"
for nodes in 100 1000 5000; do
	for pods in 0 10000 20000; do
		b=BenchmarkFilterPass/nodes=$nodes/pods=$pods
		ns=$(get "$med" "$b" ns/op) allocs=$(get "$med" "$b" allocs/op)
		target="-" met="-"
		if [ "$nodes" = 5000 ]; then
			target="<= 2 ms, O(1) allocs"
			met=$(awk -v x="$ns" -v a="$allocs" 'BEGIN { print (x <= 2e6 && a <= 10) ? "yes" : "NO" }')
		fi
		row "core (fit + score of every node)" "$nodes nodes, $pods pods asked ($(get "$med" "$b" placed-pods) placed)" \
			"$(awk -v x="$ns" 'BEGIN { printf "%.2f ms", x / 1e6 }'), $allocs allocs" "$target" "$met"
	done
done
# The chained policy that makes fit do the most per node: four GPUs held
# alone from a connected set on one NUMA node (BenchmarkFilterPassChained).
for variant in chain chain-init; do
	b=BenchmarkFilterPassChained/$variant/nodes=5000/pods=0
	ns=$(get "$med" "$b" ns/op) allocs=$(get "$med" "$b" allocs/op)
	if [ "$variant" = chain ]; then
		what="5000 nodes, no pods; one container: 4 GPUs, mutex,binpack,topology-aware,numa + numa-bind"
		target="<= 2 ms, O(1) allocs"
		met=$(awk -v x="$ns" -v a="$allocs" 'BEGIN { print (x <= 2e6 && a <= 10) ? "yes" : "NO" }')
	else
		what="the same with an init container of 2 GPUs (two containers placed per node)"
		target="-" met="-"
	fi
	row "core, chained policies and topology" "$what" "$(awk -v x="$ns" 'BEGIN { printf "%.2f ms", x / 1e6 }'), $allocs allocs" "$target" "$met"
done
# Every fifth node with four of its eight GPUs in MIG mode, seven
# instances each (BenchmarkFilterPassMIG): a pod naming no mode, and one
# asking MIG, which the 4000 nodes without MIG refuse (one reason each).
for mode in any mig; do
	b=BenchmarkFilterPassMIG/mode=$mode/nodes=5000/pods=0
	ns=$(get "$med" "$b" ns/op) allocs=$(get "$med" "$b" allocs/op)
	if [ "$mode" = any ]; then
		what="5000 nodes, 1000 with 4 shared GPUs and 4 MIG GPUs x 7 instances (half held); 1 GPU, 8000 MiB, no mode"
		target="<= 2 ms, O(1) allocs"
		met=$(awk -v x="$ns" -v a="$allocs" 'BEGIN { print (x <= 2e6 && a <= 10) ? "yes" : "NO" }')
	else
		what="the same asking MIG (4000 nodes refused, a reason each)"
		target="-" met="-"
	fi
	row "core, MIG nodes in the mix" "$what" "$(awk -v x="$ns" 'BEGIN { printf "%.2f ms", x / 1e6 }'), $allocs allocs" "$target" "$met"
done
# The leader's preemption decision: every node weighed for the fewest
# lower-priority victims (BenchmarkPreemptDecision).
pre=$(get "$med" BenchmarkPreemptDecision ns/op)
row "core, preemption" "1000 nodes x 8 GPUs full by memory (4 pods each, slots free); 1 GPU of 40000 MiB at a higher priority: the fewest victims over every node" \
	"$(awk -v x="$pre" 'BEGIN { printf "%.1f ms", x / 1e6 }'), $(get "$med" BenchmarkPreemptDecision allocs/op) allocs" "<= 100 ms" \
	"$(awk -v x="$pre" 'BEGIN { print (x <= 1e8) ? "yes" : "NO" }')"
for pods in 0 20000; do
	b=BenchmarkFilterHTTP/nodes=1000/pods=$pods
	p99=$(get "$med" "$b" p99-µs) target="-" met="-"
	if [ "$pods" = 20000 ]; then
		target="p99 <= 1 ms" met=$(awk -v x="$p99" 'BEGIN { print (x <= 1000) ? "yes" : "NO" }')
	fi
	row "extender in process" "/filter handler, 1000 nodes, $pods pods (p50 / p99)" "$(get "$med" "$b" p50-µs) / $p99 µs" "$target" "$met"
done
b=BenchmarkFilterHTTP/nodes=1000/pods=20000/caches=cold
row "extender in process" "the same, 20000 pods, the CPU's caches evicted before each call as the leader's other work does (p50 / p99)" "$(get "$med" "$b" p50-µs) / $(get "$med" "$b" p99-µs) µs" "-" "-"
row "leader memory per object" "what the leader keeps per node (8 GPUs) and per placed pod (1 GPU): informer record and index, booking; Go heap after a full collection, 1000 nodes and 20000 pods (BenchmarkBooksMemory)" \
	"$(get "$med" BenchmarkBooksMemory B/node) B per node, $(get "$med" BenchmarkBooksMemory B/pod) B per pod" "-" "-"
row "extender in process" "/bind, fake clientset, distinct nodes" "$(get "$med" BenchmarkBindDistinctNodes binds/s) binds/s" "-" "-"
row "admission" "webhook handler in process (p50 / p99)" "$(get "$med" BenchmarkAdmission p50-µs) / $(get "$med" BenchmarkAdmission p99-µs) µs" "-" "-"
row "node" "Allocate with 1000 pods in the node cache (p50 / p99)" "$(get "$med" BenchmarkAllocate1000Pods p50-µs) / $(get "$med" BenchmarkAllocate1000Pods p99-µs) µs" "-" "-"
sample=$(get "$med" BenchmarkSample ns/op) share=$(get "$med" BenchmarkSample core-%-at-1s)
row "node" "GPU usage sample: 8 GPUs, 64 containers (mock NVML, /proc attribution, decision)" \
	"$(awk -v x="$sample" 'BEGIN { printf "%.2f ms", x / 1e6 }') a sample, $share % of a core at 1 s" "<= 1 % of one core" \
	"$(awk -v x="$share" 'BEGIN { print (x <= 1) ? "yes" : "NO" }')"
attr=$(get "$med" BenchmarkAttribute ns/op)
row "node" "attribute one process (/proc/<pid>/cgroup to container ID)" "$(awk -v x="$attr" 'BEGIN { printf "%.1f µs", x / 1e3 }')" "<= 1 ms" \
	"$(awk -v x="$attr" 'BEGIN { print (x <= 1e6) ? "yes" : "NO" }')"
rm -f "$gob" "$med"

echo "bench: against kube-apiserver (1000 nodes; takes a few minutes)" >&2
hosts_entry
"$here/apiserver.sh" down
kubeconfig=$("$here/apiserver.sh" up)
make -s build bench-floor # the binary the images ship, and the floors
mkdir -p bench
rm -f bench/*.pprof
# A failing part leaves its rows out and says so; the table is still written.
KUBECONFIG=$kubeconfig VGPUD_BIN=$PWD/bin/vgpud VGPUD_NODE_FLOOR=$PWD/bin/nodefloor VGPUD_LEADER_FLOOR=$PWD/bin/leaderfloor VGPUD_K8S_BIN=$("$here/k8s-binaries.sh") VGPUD_BENCH_OUT=$rows VGPUD_BENCH_PROFILES=$PWD/bench \
	go test -tags bench -count=1 -v -timeout 40m ./scripts/bench/ 2>&1 | grep -E '^(---|ok|FAIL|panic)|_test.go' >&2 ||
	row "against kube-apiserver" "a part failed (see the log); its rows are missing" "-" "-" "NO"
"$here/apiserver.sh" down
# etcd stalls of a second or more (a slow disk sync holds every write,
# allocation records included), to read beside any refused binds above.
stalls=$(grep -cE 'slow fdatasync|took too long \([0-9.]+s\)' "${VGPUD_APISERVER_DIR:-/var/lib/vgpud-e2e/apiserver}/log/etcd.log" || true)
echo "bench: etcd requests or disk syncs that took a second or more: ${stalls:-0}" >&2
# Where the leader's CPU (and, for leader-heap, its heap; for *-allocs,
# what it allocated over the profiled round) went, for the
# targets above; apiserver-*: kube-apiserver's during the pipeline's runs
# with writes, by cumulative time (its handlers, not its allocator).
for p in bench/*.pprof; do
	[ -f "$p" ] || continue
	case $p in
	bench/apiserver-*)
		# The header, then the handlers of PATCH (the allocation
		# records), of named creates (Bindings) and of creates (Events),
		# LIST, WATCH, the managedFields bookkeeping every write pays, and
		# the GC.
		go tool pprof -top -cum -nodecount=3000 "$("$here/k8s-binaries.sh")/kube-apiserver" "$p" 2>/dev/null |
			grep -E '^(File|Type|Duration|Showing nodes)|patcher\).patchResource.func2$|CreateNamedResource.createHandler.func1.2$|handlers.CreateResource.createHandler.func1.2$|handlers.ListResource.func1$|handlers.handleWatch$|managedFieldsUpdater\).Update$|runtime.gcBgMarkWorker$|runtime.mallocgc$' >"${p%.pprof}.txt" || true ;;
	*-allocs-before.pprof) ;;
	*-allocs.pprof)
		# What the leader allocated from the start of the profiled round
		# to the end of its CPU profile (the round's deletes included).
		go tool pprof -sample_index=alloc_space -top -nodecount=30 -base "${p%.pprof}-before.pprof" bin/vgpud "$p" >"${p%.pprof}.txt" 2>/dev/null || true ;;
	*) go tool pprof -top -nodecount=30 bin/vgpud "$p" >"${p%.pprof}.txt" 2>/dev/null || true ;;
	esac
done

echo "bench: 30-pod burst and a freed GPU on a one-node cluster (3 runs)" >&2
"$here/cluster.sh" down
# One node, as the burst's earlier numbers were taken on.
kc=$(VGPUD_NODES=1 "$here/cluster.sh" up)
clog=$(mktemp)
KUBECONFIG=$kc VGPUD_SCRIPTS=$here go test -tags e2e -count=3 -v -timeout 20m -run 'TestCluster/(install_with_the_chart|a_burst_of_GPU_pods_on_one_node|GPU_freed_to_a_waiting_pod)$' ./scripts/e2e/cluster/ >"$clog" 2>&1 || true
"$here/cluster.sh" down
ratios=$(grep -oE '30 plain busybox pods to Running: [0-9.]+m?s; 30 GPU pods: [0-9.]+m?s \(ratio [0-9.]+\)' "$clog" || true)
# "GPU freed -> waiting pod Running: 772ms" as seconds, one per run.
freed=$(grep -oE 'GPU freed -> waiting pod Running: [0-9.]+m?s' "$clog" | awk '{ v = $NF; if (v ~ /ms$/) { sub(/ms$/, "", v); v /= 1000 } else sub(/s$/, "", v); print v }' | sort -n || true)
# A run that gave no ratio or no freed time failed somewhere: keep its
# log (bench/*.log is not committed) and say where it is.
if [ "$(echo "$ratios" | grep -c ratio)" -lt 3 ] || [ "$(echo "$freed" | grep -c .)" -lt 3 ]; then
	cp "$clog" bench/cluster-runs.log
	echo "bench: a one-node cluster run failed; its log is bench/cluster-runs.log" >&2
fi
rm -f "$clog"
echo "$ratios" >&2
if [ -n "$freed" ]; then
	med=$(echo "$freed" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
	row "real-cluster" "GPU freed -> the pod waiting for it Running (median of $(echo "$freed" | wc -l); all: $(echo $freed | sed 's/ / s, /g') s)" "$med s" "<= 2 s" "$(awk -v x="$med" 'BEGIN { print (x <= 2) ? "yes" : "NO" }')"
else
	row "real-cluster" "GPU freed -> the pod waiting for it Running" "did not run (see the log)" "<= 2 s" "NO"
fi
if [ -n "$ratios" ]; then
	each=$(echo "$ratios" | sed -E 's/.*ratio ([0-9.]+)\)/\1/')
	med=$(echo "$each" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
	line=$(echo "$ratios" | grep "ratio $med)" | head -1 | sed -E 's/30 plain busybox pods to Running: ([^;]+); 30 GPU pods: ([^ ]+) .*/plain \1, GPU \2/')
	all=$(echo "$each" | paste -sd, - | sed 's/,/, /g')
	# Each set starts on a settled node: the plain pods are deleted and
	# torn down before the GPU pods are made (the test says why).
	row "real-cluster burst" "30 GPU pods vs 30 plain pods to Running, each set on a settled node (median of $(echo "$ratios" | wc -l); all: $all)" "$line, ratio $med" "<= 1.1x" "$(awk -v r="$med" 'BEGIN { print (r <= 1.1) ? "yes" : "NO" }')"
else
	row "real-cluster burst" "30 GPU pods vs 30 plain pods to Running" "did not run (see the log)" "<= 1.1x" "NO"
fi

mkdir -p bench
{
	echo "# vgpud benchmarks"
	echo
	echo "- machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) memory, kernel $(uname -r)"
	echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	# bench/ aside: this run has just written its profiles there.
	echo "- commit: $(git rev-parse --short HEAD)$(git diff --quiet -- . ':!bench' || echo ' (with uncommitted changes)')"
	echo "- command: \`make bench\` ($(($(date +%s) - started)) s)"
	echo
	echo "| section | metric | value | target | met |"
	echo "| --- | --- | --- | --- | --- |"
	awk -F'\t' '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }' "$rows"
	for p in bench/*.txt; do
		[ -f "$p" ] || continue
		echo
		case $p in
		bench/apiserver-*) echo "## kube-apiserver profile, pipeline run: $(basename "$p" .txt | sed 's/^apiserver-//')" ;;
		*) echo "## Leader profile: $(basename "$p" .txt)" ;;
		esac
		echo
		echo '```'
		sed -n '1,22p' "$p"
		echo '```'
	done
} >bench/results.md
cat bench/results.md
