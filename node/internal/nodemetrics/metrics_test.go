package nodemetrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vgpud/vgpud/node/internal/gpu"
)

func TestNodeMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.Registered(nil)
	m.Registered(errors.New("kubelet gone"))
	m.Registered(nil)
	m.Allocated(true, 2*time.Millisecond)
	m.Allocated(false, time.Second)
	m.Health([]string{"GPU-a", "GPU-b"}, map[string]bool{"GPU-b": true})

	want := `
# HELP vgpud_node_gpu_healthy 1 while the GPU is offered to kubelet, 0 while an XID or a failing NVML query keeps it out.
# TYPE vgpud_node_gpu_healthy gauge
vgpud_node_gpu_healthy{uuid="GPU-a"} 1
vgpud_node_gpu_healthy{uuid="GPU-b"} 0
# HELP vgpud_node_registrations_total Device-plugin registrations with kubelet by outcome (ok, failed).
# TYPE vgpud_node_registrations_total counter
vgpud_node_registrations_total{outcome="failed"} 1
vgpud_node_registrations_total{outcome="ok"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "vgpud_node_gpu_healthy", "vgpud_node_registrations_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.allocate, "vgpud_node_allocate_seconds"); n != 2 {
		t.Fatalf("allocate series %d, want allocated and refused", n)
	}
}

// Each scrape reads the GPUs' use afresh; nothing before the GPUs open.
func TestGPUSamples(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	if n := testutil.CollectAndCount(m.samples); n != 0 {
		t.Fatalf("%d samples before the GPUs opened", n)
	}
	util := uint32(40)
	m.SampleGPUs(func() []gpu.UtilSample {
		util++
		return []gpu.UtilSample{{UUID: "GPU-a", UtilizationPercent: util, MemoryUsedMiB: 1200, MemoryTotalMiB: 40960}}
	})
	want := `
# HELP vgpud_node_gpu_utilization_ratio Share of the last NVML sample period in which the GPU's SMs were busy, whoever ran there, 0..1.
# TYPE vgpud_node_gpu_utilization_ratio gauge
vgpud_node_gpu_utilization_ratio{uuid="GPU-a"} 0.41
# HELP vgpud_node_gpu_memory_used_bytes GPU memory in use, as NVML reports it.
# TYPE vgpud_node_gpu_memory_used_bytes gauge
vgpud_node_gpu_memory_used_bytes{uuid="GPU-a"} 1.2582912e+09
# HELP vgpud_node_gpu_memory_used_mib Deprecated: vgpud_node_gpu_memory_used_bytes in the old unit; removed in the next release.
# TYPE vgpud_node_gpu_memory_used_mib gauge
vgpud_node_gpu_memory_used_mib{uuid="GPU-a"} 1200
`
	// The old name beside the new for one release.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "vgpud_node_gpu_utilization_ratio", "vgpud_node_gpu_memory_used_bytes", "vgpud_node_gpu_memory_used_mib"); err != nil {
		t.Fatal(err)
	}
}
