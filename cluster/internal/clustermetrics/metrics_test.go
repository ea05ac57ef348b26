package clustermetrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vgpud/vgpud/cluster/internal/books"
	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

type fakeBooks struct{}

func (fakeBooks) Stats() []books.NodeStats {
	return []books.NodeStats{
		{Name: "n1", Serving: true, GPUs: []books.GPUStats{{
			GPU:  protocol.GPU{UUID: "GPU-0", Model: "A100", MemoryMiB: 40960, Cores: 100, Split: 10, Healthy: true},
			Used: podmodel.Usage{MemMiB: 3000, Cores: 30, Slots: 2}, Held: 1024},
			{GPU: protocol.GPU{UUID: "GPU-1", Model: "A100", MemoryMiB: 40960, Cores: 100, Split: 10, Healthy: true}, Held: 40960, Full: true}}},
		{Name: "n2", Serving: false, GPUs: []books.GPUStats{{GPU: protocol.GPU{UUID: "GPU-9", Model: "L4", MemoryMiB: 23034, Cores: 100, Split: 10}},
			{GPU: protocol.GPU{UUID: "MIG-1", Model: "A100 MIG 1g.5gb", MemoryMiB: 4864, Cores: 15, Split: 1, Healthy: true},
				Used: podmodel.Usage{MemMiB: 4864, Cores: 15, Slots: 1}, MIG: &protocol.MIGRef{GPU: "GPU-m", GPUMemoryMiB: 40960, Profile: "1g.5gb"}},
			// Two instances an on-demand node could make: one made, one
			// neither made nor booked, which has no series.
			{GPU: protocol.GPU{UUID: "MIGX-h-1g.10gb@0", Model: "H100 MIG 1g.10gb", MemoryMiB: 9984, Cores: 13, Split: 1, Healthy: true},
				MIG: &protocol.MIGRef{GPU: "GPU-h", GPUMemoryMiB: 81559, Profile: "1g.10gb", OnDemand: true, Made: true, Start: 0, Size: 1}},
			{GPU: protocol.GPU{UUID: "MIGX-h-1g.10gb@1", Model: "H100 MIG 1g.10gb", MemoryMiB: 9984, Cores: 13, Split: 1, Healthy: true},
				MIG: &protocol.MIGRef{GPU: "GPU-h", GPUMemoryMiB: 81559, Profile: "1g.10gb", OnDemand: true, Start: 1, Size: 1}}}},
	}
}
func (fakeBooks) PodCount() int { return 2 }
func (fakeBooks) Charged() map[string]podmodel.Usage {
	return map[string]podmodel.Usage{"ai": {MemMiB: 3000, Cores: 30, Slots: 2}}
}

type fakeQuotas struct{}

func (fakeQuotas) AllLimits() map[string]podmodel.Quota {
	return map[string]podmodel.Quota{
		"ai":    {Memory: podmodel.Limit{Set: true, Hard: 20000}},
		"empty": {Cores: podmodel.Limit{Set: true, Hard: 50}},
	}
}

func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(w.Body)
	return string(body)
}

func TestScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	// Registered from process start: a replica that does not lead says so.
	before := scrape(t, reg)
	if !strings.Contains(before, "vgpud_leader 0") || strings.Contains(before, "vgpud_gpu_allocated_memory_bytes") {
		t.Fatalf("before leading:\n%s", before)
	}

	done := m.Lead(fakeBooks{}, fakeQuotas{})
	m.Filtered("unschedulable", map[string]fit.Reason{"n1": {Kind: "insufficient gpumem"}, "n2": {Kind: "device plugin not serving"}, "n3": {Kind: "insufficient gpumem"}})
	m.Filtered("fits", nil)
	m.Certificates(time.Unix(2000, 0), time.Unix(1000, 0), time.Unix(1500, 0))
	m.RotationStep("trusted")
	h := m.Instrument("filter", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/filter", nil))
	m.Bind("bound", "bound", 40*time.Millisecond)
	m.Bind("refused", "quota", 0)
	m.PodRead(true)
	m.PodRead(true)
	m.PodRead(false)
	body := scrape(t, reg)
	for _, want := range []string{
		`vgpud_extender_request_seconds_count{verb="filter"} 1`,
		`vgpud_binds_total{outcome="bound",reason="bound"} 1`,
		`vgpud_binds_total{outcome="refused",reason="quota"} 1`,
		`vgpud_binds_total{outcome="failed",reason="node_busy"} 0`,
		`vgpud_bind_wait_seconds_count 2`,
		`vgpud_extender_pod_reads_total{from="informer"} 2`,
		`vgpud_extender_pod_reads_total{from="body"} 1`,
		`vgpud_leader 1`,
		`vgpud_gpu_allocated_memory_bytes{node="n1",uuid="GPU-0"} 3.145728e+09`,
		`vgpud_gpu_allocated_cores_ratio{node="n1",uuid="GPU-0"} 0.3`,
		`vgpud_gpu_allocated_slots{node="n1",uuid="GPU-0"} 2`,
		`vgpud_gpu_capacity_memory_bytes{model="A100",node="n1",uuid="GPU-0"} 4.294967296e+10`,
		`vgpud_gpu_capacity_cores_ratio{model="A100",node="n1",uuid="GPU-0"} 1`,
		// The old names beside the new, for one release.
		`vgpud_gpu_allocated_memory_mib{node="n1",uuid="GPU-0"} 3000`,
		`vgpud_gpu_allocated_cores{node="n1",uuid="GPU-0"} 30`,
		`vgpud_gpu_capacity_memory_mib{model="A100",node="n1",uuid="GPU-0"} 40960`,
		`vgpud_gpu_capacity_cores{model="A100",node="n1",uuid="GPU-0"} 100`,
		`vgpud_gpu_capacity_slots{model="A100",node="n1",uuid="GPU-0"} 10`,
		`vgpud_gpu_healthy{model="A100",node="n1",uuid="GPU-0"} 1`,
		`vgpud_gpu_healthy{model="L4",node="n2",uuid="GPU-9"} 0`,
		`vgpud_gpu_held_memory_bytes{node="n1",uuid="GPU-0"} 1.073741824e+09`,
		`vgpud_gpu_full{model="A100",node="n1",uuid="GPU-0"} 0`,
		`vgpud_gpu_held_memory_bytes{node="n1",uuid="GPU-1"} 4.294967296e+10`,
		`vgpud_gpu_full{model="A100",node="n1",uuid="GPU-1"} 1`,
		`vgpud_gpu_held_memory_bytes{node="n2",uuid="GPU-9"} 0`,
		`vgpud_gpu_mig_instance{gpu="GPU-m",node="n2",profile="1g.5gb",uuid="MIG-1"} 1`,
		`vgpud_gpu_allocated_slots{node="n2",uuid="MIG-1"} 1`,
		`vgpud_gpu_mig_instance{gpu="GPU-h",node="n2",profile="1g.10gb",uuid="MIGX-h-1g.10gb@0"} 1`,
		`vgpud_cluster_node_serving{node="n1"} 1`,
		`vgpud_cluster_node_serving{node="n2"} 0`,
		`vgpud_namespace_quota_memory_limit_bytes{namespace="ai"} 2.097152e+10`,
		`vgpud_namespace_quota_memory_used_bytes{namespace="ai"} 3.145728e+09`,
		`vgpud_namespace_quota_cores_used_ratio{namespace="ai"} 0.3`,
		`vgpud_namespace_quota_cores_limit_ratio{namespace="empty"} 0.5`,
		`vgpud_namespace_quota_cores_used_ratio{namespace="empty"} 0`,
		`vgpud_namespace_quota_limit{namespace="ai",resource="gpumem"} 20000`,
		`vgpud_namespace_quota_used{namespace="ai",resource="gpumem"} 3000`,
		`vgpud_namespace_quota_used{namespace="ai",resource="gpucores"} 30`,
		`vgpud_namespace_quota_limit{namespace="empty",resource="gpucores"} 50`,
		`vgpud_namespace_quota_used{namespace="empty",resource="gpucores"} 0`,
		`vgpud_filter_pods_total{outcome="unschedulable"} 1`,
		`vgpud_filter_pods_total{outcome="fits"} 1`,
		`vgpud_filter_node_refusals_total{reason="insufficient gpumem"} 2`,
		`vgpud_filter_node_refusals_total{reason="device plugin not serving"} 1`,
		`vgpud_certificate_expiry_timestamp_seconds{certificate="serving"} 1000`,
		`vgpud_ca_rotation_steps_total{step="trusted"} 1`,
		`vgpud_leader_acquired_total 1`,
		`vgpud_cache_pods 2`,
		`vgpud_cache_nodes 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(body, "MIGX-h-1g.10gb@1") {
		t.Error("an instance neither made nor booked has series")
	}
	// What is held is reported per physical GPU: a MIG instance has none.
	if strings.Contains(body, `vgpud_gpu_held_memory_bytes{node="n2",uuid="MIG-1"}`) || strings.Contains(body, `vgpud_gpu_full{model="A100 MIG 1g.5gb"`) {
		t.Error("a MIG instance has held-memory series")
	}

	done()
	after := scrape(t, reg)
	if !strings.Contains(after, "vgpud_leader 0") || strings.Contains(after, "vgpud_gpu_allocated_memory_bytes") || strings.Contains(after, "vgpud_certificate_expiry_timestamp_seconds{") {
		t.Fatalf("after leading, the books of the last term are still reported:\n%s", after)
	}
}
