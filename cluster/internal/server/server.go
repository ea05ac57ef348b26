// Package server is an HTTPS listener of the leader: one serves the
// admission webhook and the /healthz and /readyz probes (server TLS), the
// other the scheduler extender (mutual TLS). Their certificates come from
// package certs and change without a restart.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"k8s.io/utils/clock"
)

// ReadyCheck is one readiness condition; nil means ready.
type ReadyCheck struct {
	Name string
	Func func() error
}

// Server serves registered handlers over TLS; the tls.Config picks the
// certificate per handshake, so a renewal needs no restart.
type Server struct {
	addr      string
	tls       *tls.Config
	mux       *http.ServeMux
	checks    []ReadyCheck
	reconnect context.Context // once done, answers ask clients to reconnect
	clock     clock.WithTicker
	bound     *bounder
	log       *slog.Logger
}

// New returns a Server for addr, clk timing its shutdown and checks.
// Register handlers and checks before Run.
func New(addr string, tlsConfig *tls.Config, clk clock.WithTicker, log *slog.Logger) *Server {
	s := &Server{addr: addr, tls: tlsConfig, mux: http.NewServeMux(), clock: clk, bound: newBounder(), log: log}
	s.mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	s.mux.HandleFunc("/readyz", s.readyz)
	return s
}

// Handle registers h for path.
func (s *Server) Handle(path string, h http.Handler) { s.mux.Handle(path, h) }

// ReconnectAfter makes every answer given once ctx has ended ask its client
// to reconnect: "Connection: close" on HTTP/1.1, a graceful GOAWAY on
// HTTP/2. A leader handing over keeps serving for a while, but the
// apiserver's kept-alive connections would stay on it (the Service only
// routes new ones) until its shutdown closed them under the apiserver's
// next request: a webhook call failed with "broken pipe", a create refused.
// Asked to reconnect, the client opens a new connection, to the successor.
func (s *Server) ReconnectAfter(ctx context.Context) { s.reconnect = ctx }

// AllowConcurrent sets how many small requests (bound.go) the listener
// serves at once, 64 unless set; call before Run.
func (s *Server) AllowConcurrent(n int) { s.bound.allow(n) }

// OnRefused calls f for each request answered 429 because others in
// flight held the listener's share (bound.go). Call before Run.
func (s *Server) OnRefused(f func()) { s.bound.onRefused = f }

// AddCheck adds a readiness condition to /readyz.
func (s *Server) AddCheck(c ReadyCheck) { s.checks = append(s.checks, c) }

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	var failed []string
	for _, c := range s.checks {
		if err := c.Func(); err != nil {
			failed = append(failed, c.Name+": "+err.Error())
		}
	}
	if len(failed) > 0 {
		http.Error(w, "not ready: "+strings.Join(failed, "; "), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// Run listens until ctx ends, then drains in-flight requests for up to 3 s.
// An address in use is retried for up to listenWait: a predecessor on the
// same host (hostNetwork, or tests) keeps serving until it has handed over.
func (s *Server) Run(ctx context.Context) error {
	ln, err := s.listen(ctx)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// listenWait bounds the wait for a predecessor to free the address.
const listenWait = 15 * time.Second

func (s *Server) listen(ctx context.Context) (net.Listener, error) {
	deadline := s.clock.Now().Add(listenWait)
	for {
		ln, err := net.Listen("tcp", s.addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || s.clock.Now().After(deadline) {
			if err != nil {
				return nil, fmt.Errorf("listen on %s: %w", s.addr, err)
			}
			return ln, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("listen on %s: %w", s.addr, ctx.Err())
		case <-s.clock.After(100 * time.Millisecond):
		}
	}
}

// Serve is Run on a listener the caller opened.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	h := s.bound.wrap(s.mux)
	if s.reconnect != nil {
		h = reconnecting(s.reconnect, h)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       readTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		HTTP2:             &http.HTTP2Config{MaxReceiveBufferPerStream: h2StreamWindow, MaxReceiveBufferPerConnection: h2ConnWindow},
		// kube-scheduler and kube-apiserver reuse connections; idle ones
		// are cheap, but not forever.
		IdleTimeout: 2 * time.Minute,
		TLSConfig:   s.tls,
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	s.log.Info("serving HTTPS", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("serve HTTPS on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shut down HTTPS server: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve HTTPS on %s: %w", ln.Addr(), err)
	}
	return nil
}

func reconnecting(after context.Context, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if after.Err() != nil {
			// net/http turns this into a GOAWAY on HTTP/2.
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}
