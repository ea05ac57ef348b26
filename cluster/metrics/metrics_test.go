package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/cluster/core"
)

type fakeSource struct{}

func (fakeSource) Usage() map[string]map[string]core.Usage {
	return map[string]map[string]core.Usage{"n1": {"GPU-0": {MemMiB: 3000, Cores: 30, Slots: 2}}}
}
func (fakeSource) Pods() []string { return []string{"ai/a@n1", "ai/b@n1"} }

func TestScrape(t *testing.T) {
	m := New(fakeSource{})
	h := m.Instrument("filter", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/filter", nil))
	m.Bind(true, 40*time.Millisecond)
	m.Bind(false, 0)
	m.SetLeader(true)

	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(w.Body)
	for _, want := range []string{
		`vgpud_extender_request_seconds_count{verb="filter"} 1`,
		`vgpud_binds_total{outcome="bound"} 1`,
		`vgpud_binds_total{outcome="failed"} 1`,
		`vgpud_bind_wait_seconds_count 2`,
		`vgpud_leader 1`,
		`vgpud_gpu_allocated_memory_mib{node="n1",uuid="GPU-0"} 3000`,
		`vgpud_gpu_allocated_cores{node="n1",uuid="GPU-0"} 30`,
		`vgpud_gpu_allocated_slots{node="n1",uuid="GPU-0"} 2`,
		`vgpud_cache_pods 2`,
		`vgpud_cache_nodes 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}
