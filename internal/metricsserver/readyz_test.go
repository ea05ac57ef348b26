package metricsserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// kubelet's probe sends no token: /readyz answers it, and only it, without
// a review, while /metrics still wants an authorized token.
func TestReadyzAnswersTheProbeWithoutAToken(t *testing.T) {
	var reviews atomic.Int32
	kube := apiserver(&reviews)
	why := "device plugin not registered with kubelet yet"
	h := handler(prometheus.NewRegistry(), false, NewReviewer(kube.AuthenticationV1(), kube.AuthorizationV1()), func() (bool, string) { return why == "", why })
	if w := get(h, "/readyz", ""); w.Code != http.StatusServiceUnavailable || w.Body.String() != "not ready\n" {
		t.Fatalf("not ready: %d %q, want 503 and no reason (anyone may ask)", w.Code, w.Body)
	}
	why = ""
	if w := get(h, "/readyz", ""); w.Code != http.StatusOK || w.Body.String() != "ok\n" {
		t.Fatalf("ready: %d %q, want 200 ok", w.Code, w.Body)
	}
	if reviews.Load() != 0 {
		t.Fatalf("%d TokenReviews for the probe", reviews.Load())
	}
	if w := scrape(h, ""); w.Code != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token: %d, want 401", w.Code)
	}
	if w := scrape(h, "prom-token"); w.Code != http.StatusOK {
		t.Fatalf("/metrics with the scraper's token: %d, want 200", w.Code)
	}
	before := reviews.Load()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/readyz", nil))
	if w.Code != http.StatusNotFound || reviews.Load() != before {
		t.Fatalf("POST /readyz: %d after %d reviews, want 404 before any (only the probe's GET is served)", w.Code, reviews.Load()-before)
	}
}

func TestProbeMismatchNamesWhatFailsTheProbe(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{DefaultOptions(), ""},
		{Options{MetricsListen: "0.0.0.0:9090", MetricsSecure: true}, ""},
		{Options{MetricsListen: "", MetricsSecure: true}, "nothing serves /readyz"},
		{Options{MetricsListen: ":9090"}, "plain HTTP"},
		{Options{MetricsListen: ":9091", MetricsSecure: true}, "not port 9090"},
		{Options{MetricsListen: "127.0.0.1:9090", MetricsSecure: true}, "pod's address"},
		{Options{MetricsListen: "9090", MetricsSecure: true}, "not host:port"},
	} {
		got := tc.o.ProbeMismatch()
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.o, got, tc.want)
		}
	}
}
