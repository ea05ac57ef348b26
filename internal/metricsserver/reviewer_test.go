package metricsserver

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// apiserver answers TokenReviews for two tokens and lets only the
// prometheus user get /metrics; reviews counts the calls.
func apiserver(reviews *atomic.Int32) *fake.Clientset {
	kube := fake.NewClientset()
	kube.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		// As the apiserver: a token authenticates only for an audience
		// it was made for, and the review says which.
		made := map[string][]string{"prom-token": {metricsAudience}, "tenant-token": {metricsAudience}, "apiserver-token": {"https://kubernetes.default.svc"}}[tr.Spec.Token]
		users := map[string]string{"prom-token": "system:serviceaccount:monitoring:prometheus", "tenant-token": "system:serviceaccount:ai:tenant", "apiserver-token": "system:serviceaccount:monitoring:prometheus"}
		for _, aud := range tr.Spec.Audiences {
			if slices.Contains(made, aud) {
				tr.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{aud}, User: authnv1.UserInfo{Username: users[tr.Spec.Token]}}
			}
		}
		return true, tr, nil
	})
	kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "system:serviceaccount:monitoring:prometheus" && na != nil && na.Path == "/metrics" && na.Verb == "get"
		return true, sar, nil
	})
	return kube
}

func scrape(h http.Handler, token string) *httptest.ResponseRecorder {
	return get(h, "/metrics", token)
}

func get(h http.Handler, path, token string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestScrapeNeedsAnAuthorizedToken(t *testing.T) {
	var reviews atomic.Int32
	kube := apiserver(&reviews)
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("vgpud_leader 1\n")) })
	h := NewReviewer(kube.AuthenticationV1(), kube.AuthorizationV1()).Wrap(mux)
	for _, tc := range []struct {
		token string
		code  int
	}{
		{"", http.StatusUnauthorized},
		{"forged", http.StatusUnauthorized},
		// Good with the apiserver, not made for vgpud: a replica that is
		// sent it could use it elsewhere, so it is not taken.
		{"apiserver-token", http.StatusUnauthorized},
		{"tenant-token", http.StatusForbidden},
		{"prom-token", http.StatusOK},
	} {
		if w := scrape(h, tc.token); w.Code != tc.code {
			t.Errorf("token %q: %d %q, want %d", tc.token, w.Code, w.Body, tc.code)
		}
	}
	// Answers, refusals included, are kept: a scraper every few seconds,
	// or a flood of one bad token, costs the apiserver one review.
	before := reviews.Load()
	for range 50 {
		scrape(h, "prom-token")
		scrape(h, "forged")
	}
	if got := reviews.Load() - before; got != 0 {
		t.Fatalf("%d more TokenReviews for cached tokens", got)
	}
	// Made-up paths are answered before any review.
	for i := range 20 {
		if w := get(h, fmt.Sprintf("/x%d", i), "new-token"); w.Code != http.StatusNotFound {
			t.Fatalf("made-up path: %d", w.Code)
		}
	}
	if got := reviews.Load() - before; got != 0 {
		t.Fatalf("%d TokenReviews for made-up paths", got)
	}
}

// While the review slots are taken, a token not seen before is answered
// 429, not queued behind them.
func TestScrapeReviewsAreBounded(t *testing.T) {
	var reviews atomic.Int32
	kube := apiserver(&reviews)
	rv := NewReviewer(kube.AuthenticationV1(), kube.AuthorizationV1())
	for range maxReviews {
		rv.slots <- struct{}{}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", http.NotFoundHandler())
	h := rv.Wrap(mux)
	if w := scrape(h, "prom-token"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("%d %q, want 429", w.Code, w.Body)
	}
	if reviews.Load() != 0 {
		t.Fatal("reviewed while busy")
	}
}
