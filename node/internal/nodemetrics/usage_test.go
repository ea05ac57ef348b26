package nodemetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vgpud/vgpud/node/internal/usage"
)

func TestUsageMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	c := &usage.Container{ID: "c1", Namespace: "t", Pod: "p", Name: "main"}
	v := usage.Outcome{
		Uses:         []usage.Use{{Container: c, GPU: "GPU-a", UsedBytes: 3 << 30, LimitBytes: 2 << 30, SMPercent: 40, Cores: 25}, {Container: c, GPU: "GPU-b", UsedBytes: 1 << 20, LimitBytes: 2 << 30, SMPercent: -1}},
		Unattributed: []usage.Process{{GPU: "GPU-a", PID: 9, UsedBytes: 1 << 30}, {GPU: "GPU-a", PID: 10, UsedBytes: 1 << 30, Orphaned: true, Holder: usage.Holder{Namespace: "gone"}}},
	}
	// Memory under a PID that ended, still the container's.
	v.Uses[0].Processes = []usage.Process{{GPU: "GPU-a", PID: 11, UsedBytes: 3 << 30, Orphaned: true}}
	// The same pod's name, made again while the old container still held
	// memory: one series, summed.
	again := &usage.Container{ID: "c2", Namespace: "t", Pod: "p", Name: "main"}
	v.Uses = append(v.Uses, usage.Use{Container: again, GPU: "GPU-b", UsedBytes: 1 << 20, LimitBytes: 2 << 30, SMPercent: -1})
	m.ReportUsage(func() usage.Outcome { return v })
	m.Killed(usage.Kill{Use: v.Uses[0]})
	want := `
# HELP vgpud_node_container_gpu_kills_total Processes vgpud killed because their container held more GPU memory than its slice plus the margin.
# TYPE vgpud_node_container_gpu_kills_total counter
vgpud_node_container_gpu_kills_total{container="main",namespace="t",pod_name="p",uuid="GPU-a"} 1
# HELP vgpud_node_container_gpu_memory_used_bytes GPU memory the container's processes hold on the GPU, as the driver reports it.
# TYPE vgpud_node_container_gpu_memory_used_bytes gauge
vgpud_node_container_gpu_memory_used_bytes{container="main",namespace="t",pod_name="p",uuid="GPU-a"} 3.221225472e+09
vgpud_node_container_gpu_memory_used_bytes{container="main",namespace="t",pod_name="p",uuid="GPU-b"} 2.097152e+06
# HELP vgpud_node_container_gpu_sm_ratio The container's processes' share of the GPU's SM time over the last sample period, 0..1; absent where the driver gave no sample.
# TYPE vgpud_node_container_gpu_sm_ratio gauge
vgpud_node_container_gpu_sm_ratio{container="main",namespace="t",pod_name="p",uuid="GPU-a"} 0.4
# HELP vgpud_node_gpu_unattributed_memory_bytes GPU memory held by processes no granted container of this node owns (the host's, another runtime's, another node's).
# TYPE vgpud_node_gpu_unattributed_memory_bytes gauge
vgpud_node_gpu_unattributed_memory_bytes{uuid="GPU-a"} 2.147483648e+09
# HELP vgpud_node_gpu_orphaned_memory_bytes GPU memory listed under PIDs whose process ended (a child or another process holds the descriptor), by the namespace of the pod that opened it ("" for none): charged there until the driver frees it.
# TYPE vgpud_node_gpu_orphaned_memory_bytes gauge
vgpud_node_gpu_orphaned_memory_bytes{namespace="gone",uuid="GPU-a"} 1.073741824e+09
vgpud_node_gpu_orphaned_memory_bytes{namespace="t",uuid="GPU-a"} 3.221225472e+09
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "vgpud_node_container_gpu_kills_total", "vgpud_node_container_gpu_memory_used_bytes",
		"vgpud_node_container_gpu_sm_ratio", "vgpud_node_gpu_unattributed_memory_bytes", "vgpud_node_gpu_orphaned_memory_bytes"); err != nil {
		t.Error(err)
	}
	// A granted container's counter exists at 0; a gone pod's counters go.
	m.KillsFrom0("t", "q", "main", "GPU-a")
	if got := testutil.ToFloat64(m.usageCounts.kills.WithLabelValues("t", "q", "main", "GPU-a")); got != 0 {
		t.Errorf("a granted container's kills start at %v", got)
	}
	m.ForgetPod("t", "p")
	if n := testutil.CollectAndCount(m.usageCounts.kills); n != 1 {
		t.Errorf("%d kill series after pod t/p went; want t/q's alone", n)
	}
	// The next sample no longer shows the container: neither do the metrics.
	v = usage.Outcome{}
	if n := testutil.CollectAndCount(m.usage); n != 0 {
		t.Errorf("%d series after the container left", n)
	}
}
