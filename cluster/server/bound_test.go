package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// post sends a body of n bytes (declared length) through b to h.
func post(b *bounder, h http.Handler, n int) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/webhook", strings.NewReader(strings.Repeat("x", n)))
	w := httptest.NewRecorder()
	b.wrap(h).ServeHTTP(w, r)
	return w
}

// While large bodies hold the listener's budget, another large one is
// answered 429 after the wait, and small ones and probes are still served.
func TestBounderKeepsSmallRequestsServedUnderALargeFlood(t *testing.T) {
	b := newBounder()
	b.wait = 50 * time.Millisecond
	var refused atomic.Int32
	b.onRefused = func() { refused.Add(1) }
	release := make(chan struct{})
	var held sync.WaitGroup
	var holding sync.WaitGroup
	block := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		default:
			if r.ContentLength > smallBody {
				holding.Done()
				<-release
			}
		}
		w.WriteHeader(http.StatusOK)
	})
	const big = 5 << 20
	n := largeBudget / big // fit at once
	holding.Add(n)
	for range n {
		held.Add(1)
		go func() { defer held.Done(); post(b, block, big) }()
	}
	holding.Wait()
	if w := post(b, block, big); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("large body over the budget: %d %q", w.Code, w.Body)
	}
	if refused.Load() != 1 {
		t.Fatalf("refused = %d, want 1", refused.Load())
	}
	if w := post(b, block, 4<<10); w.Code != http.StatusOK {
		t.Fatalf("small body during the flood: %d %q", w.Code, w.Body)
	}
	probe := httptest.NewRecorder()
	b.wrap(block).ServeHTTP(probe, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if probe.Code != http.StatusOK {
		t.Fatalf("probe during the flood: %d", probe.Code)
	}
	close(release)
	held.Wait()
	if w := post(b, block, big); w.Code != http.StatusOK {
		t.Fatalf("large body after the flood: %d %q", w.Code, w.Body)
	}
}

func TestBounderRefusesADeclaredBodyOverTheMost(t *testing.T) {
	b := newBounder()
	r := httptest.NewRequest(http.MethodPost, "/webhook", strings.NewReader("{}"))
	r.ContentLength = maxBody + 1
	w := httptest.NewRecorder()
	b.wrap(http.NotFoundHandler()).ServeHTTP(w, r)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d %q", w.Code, w.Body)
	}
}

func TestBounderRefusesABodyOfUnknownLength(t *testing.T) {
	b := newBounder()
	r := httptest.NewRequest(http.MethodPost, "/webhook", strings.NewReader("{}"))
	r.ContentLength = -1
	w := httptest.NewRecorder()
	b.wrap(http.NotFoundHandler()).ServeHTTP(w, r)
	if w.Code != http.StatusLengthRequired || !strings.Contains(w.Body.String(), "Content-Length") {
		t.Fatalf("%d %q", w.Code, w.Body)
	}
}
