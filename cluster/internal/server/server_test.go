package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vgpud/vgpud/cluster/internal/server/certs"
)

// testServing returns a serving certificate for vgpud.vgpud-system.svc
// and a pool holding the CA that signed it.
func testServing(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	now := time.Now()
	ca, err := certs.GenerateCA(now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := certs.GenerateServing(ca, []string{"vgpud.vgpud-system.svc"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(serving.Cert, serving.Key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.Cert)
	return pair, pool
}

func TestServesTLSProbesAndHandlers(t *testing.T) {
	pair, pool := testServing(t)
	var haveCert atomic.Bool
	getCert := func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if !haveCert.Load() {
			return nil, errors.New("no certificate yet")
		}
		return &pair, nil
	}
	s := New("127.0.0.1:0", &tls.Config{GetCertificate: getCert}, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.Handle("/filter", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "filtered") }))
	var synced atomic.Bool
	s.AddCheck(ReadyCheck{Name: "cache", Func: func() error {
		if !synced.Load() {
			return errors.New("informers not synced")
		}
		return nil
	}})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()

	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "vgpud.vgpud-system.svc"}}}
	get := func(path string) (int, string, error) {
		resp, err := client.Get("https://" + ln.Addr().String() + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}

	if _, _, err := get("/healthz"); err == nil {
		t.Fatal("handshake succeeded without a certificate")
	}
	haveCert.Store(true)
	if code, _, err := get("/healthz"); err != nil || code != 200 {
		t.Fatalf("/healthz: %d %v", code, err)
	}
	code, body, err := get("/readyz")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "cache: informers not synced") {
		t.Fatalf("/readyz before sync: %d %q %v", code, body, err)
	}
	synced.Store(true)
	if code, _, err := get("/readyz"); err != nil || code != 200 {
		t.Fatalf("/readyz after sync: %d %v", code, err)
	}
	if code, body, err := get("/filter"); err != nil || code != 200 || body != "filtered" {
		t.Fatalf("/filter: %d %q %v", code, body, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("clean shutdown returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("server did not stop")
	}
}

func TestRunReportsBadAddress(t *testing.T) {
	s := New("256.0.0.1:bad", nil, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	err := s.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "listen on 256.0.0.1:bad") {
		t.Fatalf("want a listen error naming the address, got %v", err)
	}
}

// A predecessor still holding the address (it hands over first) delays the
// listener; it binds once the address is free.
func TestRunWaitsForAnAddressInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fc := clocktesting.NewFakeClock(time.Now())
	s := New(held.Addr().String(), nil, fc, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan net.Listener, 1)
	go func() {
		ln, err := s.listen(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- ln
	}()
	// Each wait between tries is one timer on the fake clock: the address
	// was in use every time.
	waiting := func(context.Context) (bool, error) { return fc.HasWaiters(), nil }
	for try := range 4 {
		if try > 0 {
			fc.Step(100 * time.Millisecond)
		}
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true, waiting); err != nil {
			t.Fatalf("no wait after try %d", try+1)
		}
	}
	select {
	case <-got:
		t.Fatal("listened on an address in use")
	default:
	}
	_ = held.Close()
	fc.Step(100 * time.Millisecond)
	select {
	case ln := <-got:
		if ln != nil {
			_ = ln.Close()
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("did not listen once the address was freed")
	}
}

// TestReconnectAfterMovesClientsToANewConnection: once the reconnect
// context has ended, a client that kept its connection alive is sent to a
// new one after its next answer, on HTTP/1.1 and on HTTP/2 alike, and
// that answer still arrives whole.
func TestReconnectAfterMovesClientsToANewConnection(t *testing.T) {
	pair, pool := testServing(t)
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2], func(t *testing.T) {
			s := New("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}}, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			s.Handle("/webhook", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "admitted") }))
			handingOver, handOver := context.WithCancel(context.Background())
			s.ReconnectAfter(handingOver)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = s.Serve(ctx, ln) }()

			var conns atomic.Int32
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "vgpud.vgpud-system.svc"}, ForceAttemptHTTP2: h2,
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					conns.Add(1)
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}}
			if !h2 {
				tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			}
			client := &http.Client{Timeout: 3 * time.Second, Transport: tr}
			post := func() (*http.Response, string) {
				t.Helper()
				resp, err := client.Post("https://"+ln.Addr().String()+"/webhook", "application/json", strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if string(b) != "admitted" {
					t.Fatalf("answer %q", b)
				}
				if h2 != (resp.ProtoMajor == 2) {
					t.Fatalf("spoke %s", resp.Proto)
				}
				return resp, string(b)
			}
			post()
			post()
			if n := conns.Load(); n != 1 {
				t.Fatalf("%d connections for two calls before the handover, want 1 kept alive", n)
			}
			handOver()
			resp, _ := post()
			if !h2 && !resp.Close {
				t.Error("answer during the handover does not say Connection: close")
			}
			// HTTP/2's GOAWAY reaches the client's read loop a moment after
			// the answer.
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 2*time.Second, true, func(context.Context) (bool, error) {
				post()
				return conns.Load() == 2, nil
			}); err != nil {
				t.Fatalf("still %d connection(s) after the handover began, want a new one", conns.Load())
			}
		})
	}
}
