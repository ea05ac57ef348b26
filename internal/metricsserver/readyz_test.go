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
	if w := get(h, "/readyz", ""); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), why) {
		t.Fatalf("not ready: %d %q, want 503 and why", w.Code, w.Body)
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
