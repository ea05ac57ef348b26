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

	"github.com/vgpud/vgpud/podmodel"
)

type fakeSource struct{}

func (fakeSource) Usage() map[string]map[string]podmodel.Usage {
	return map[string]map[string]podmodel.Usage{"n1": {"GPU-0": {MemMiB: 3000, Cores: 30, Slots: 2}}}
}
func (fakeSource) PodCount() int { return 2 }

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
	if !strings.Contains(before, "vgpud_leader 0") || strings.Contains(before, "vgpud_gpu_allocated_memory_mib") {
		t.Fatalf("before leading:\n%s", before)
	}

	done := m.Lead(fakeSource{})
	h := m.Instrument("filter", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/filter", nil))
	m.Bind(true, 40*time.Millisecond)
	m.Bind(false, 0)
	m.PodRead(true)
	m.PodRead(true)
	m.PodRead(false)
	body := scrape(t, reg)
	for _, want := range []string{
		`vgpud_extender_request_seconds_count{verb="filter"} 1`,
		`vgpud_binds_total{outcome="bound"} 1`,
		`vgpud_binds_total{outcome="failed"} 1`,
		`vgpud_bind_wait_seconds_count 2`,
		`vgpud_extender_pod_reads_total{from="informer"} 2`,
		`vgpud_extender_pod_reads_total{from="body"} 1`,
		`vgpud_leader 1`,
		`vgpud_gpu_allocated_memory_mib{node="n1",uuid="GPU-0"} 3000`,
		`vgpud_gpu_allocated_cores{node="n1",uuid="GPU-0"} 30`,
		`vgpud_gpu_allocated_slots{node="n1",uuid="GPU-0"} 2`,
		`vgpud_cache_pods 2`,
		`vgpud_cache_nodes 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}

	done()
	after := scrape(t, reg)
	if !strings.Contains(after, "vgpud_leader 0") || strings.Contains(after, "vgpud_gpu_allocated_memory_mib") {
		t.Fatalf("after leading, the books of the last term are still reported:\n%s", after)
	}
}
