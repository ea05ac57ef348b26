package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/vgpud/vgpud/podmodel"
)

// BenchmarkAdmission times one admission in process: the HTTP handler
// decoding a four-container review, deciding, diffing and encoding the
// answer. It reports p50 and p99 of the timed iterations.
func BenchmarkAdmission(b *testing.B) {
	_, body := readReview(b, "visible_devices_none")
	cfg := testConfig()
	cfg.VisibleDevicesNone = true
	h := NewHTTPHandler(newPods(cfg, quotas{"ai-team": {Memory: podmodel.Limit{Set: true, Hard: 1 << 40}}}), quietLog())
	durations := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		r := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		durations = append(durations, time.Since(start))
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	b.StopTimer()
	slices.Sort(durations)
	pct := func(p float64) float64 { return float64(durations[int(p*float64(len(durations)-1))]) / 1e3 }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}
