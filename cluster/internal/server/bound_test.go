package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
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

// Only maxLargeWaiting large bodies wait for their share; the next is
// answered 429 at once, not after the wait.
func TestBounderLetsOnlyAFewLargeRequestsWait(t *testing.T) {
	b := newBounder()
	b.wait = 10 * time.Second
	release := make(chan struct{})
	var holding sync.WaitGroup
	block := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == largeBudget {
			holding.Done()
			<-release
		}
		w.WriteHeader(http.StatusOK)
	})
	var all sync.WaitGroup
	holding.Add(1)
	all.Go(func() { post(b, block, largeBudget) })
	holding.Wait()
	codes := make(chan int, maxLargeWaiting)
	for range maxLargeWaiting {
		all.Go(func() { codes <- post(b, block, 1<<20).Code })
	}
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return b.largeWaiting.Load() >= maxLargeWaiting, nil }); err != nil {
		t.Fatalf("%d large requests waiting, want %d", b.largeWaiting.Load(), maxLargeWaiting)
	}
	start := time.Now()
	if w := post(b, block, 1<<20); w.Code != http.StatusTooManyRequests || time.Since(start) > time.Second {
		t.Fatalf("one more large body: %d after %v, want 429 at once", w.Code, time.Since(start))
	}
	if w := post(b, block, 4<<10); w.Code != http.StatusOK {
		t.Fatalf("small body meanwhile: %d", w.Code)
	}
	close(release)
	all.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("a waiting large body was answered %d once the budget was free", c)
		}
	}
	if n := b.largeWaiting.Load(); n != 0 {
		t.Errorf("%d still counted as waiting", n)
	}
}

// Large reviews waiting for their share hold their streams' windows
// unread. On one HTTP/2 connection, as the apiserver sends every review,
// they must not stall a small review behind them.
func TestLargeRequestsWaitingOnOneConnectionDoNotStallSmallOnes(t *testing.T) {
	pair, pool := testServing(t)
	s := New("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}}, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.bound.wait = 10 * time.Second
	var refused atomic.Int32
	s.OnRefused(func() { refused.Add(1) })
	release := make(chan struct{})
	holding := make(chan struct{})
	s.Handle("/webhook", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if r.ContentLength == 7<<20 { // holds most of the budget
			close(holding)
			<-release
		}
		w.WriteHeader(http.StatusOK)
	}))
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: tcp}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-served })

	client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "vgpud.vgpud-system.svc"}}}
	url := "https://" + ln.Addr().String() + "/webhook"
	send := func(n int) (int, error) {
		resp, err := client.Post(url, "application/json", bytes.NewReader(make([]byte, n)))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 {
			return 0, fmt.Errorf("HTTP/%d.%d, want one HTTP/2 connection", resp.ProtoMajor, resp.ProtoMinor)
		}
		return resp.StatusCode, nil
	}
	var all sync.WaitGroup
	defer all.Wait()
	defer close(release)
	all.Go(func() { _, _ = send(7 << 20) })
	<-holding
	// Twenty more, each too large for what is left: they wait, or are
	// refused at once.
	const more = 20
	for range more {
		all.Go(func() { _, _ = send(3 << 19) })
	}
	// All have reached the bounder, and their bodies the windows: the
	// server has read at least the first body and a full window for each
	// one waiting.
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return s.bound.largeWaiting.Load() == maxLargeWaiting && refused.Load() == more-maxLargeWaiting &&
			ln.read.Load() >= 7<<20+maxLargeWaiting*h2StreamWindow, nil
	}); err != nil {
		t.Fatalf("%d waiting, %d refused, %d bytes read; want %d, %d, at least %d", s.bound.largeWaiting.Load(), refused.Load(), ln.read.Load(),
			maxLargeWaiting, more-maxLargeWaiting, 7<<20+maxLargeWaiting*h2StreamWindow)
	}
	start := time.Now()
	code, err := send(4 << 10)
	if err != nil || code != http.StatusOK {
		t.Fatalf("small review behind the waiting ones: %d %v", code, err)
	}
	took := time.Since(start)
	if took > 2*time.Second {
		t.Fatalf("small review answered after %v: stalled behind the waiting ones", took)
	}
	t.Logf("small review answered in %v beside %d waiting", took, s.bound.largeWaiting.Load())
}

// countingListener counts the bytes read from the connections it accepts.
type countingListener struct {
	net.Listener
	read atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, read: &l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}
