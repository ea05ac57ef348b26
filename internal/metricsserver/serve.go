package metricsserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	certutil "k8s.io/client-go/util/cert"
)

// Serve serves reg on /metrics until ctx ends; with profiling,
// Go's pprof too. With auth, over HTTPS with a certificate made at start
// (Prometheus verifies the token it sends, not vgpud: scrape with
// insecure_skip_verify, as for kubebuilder's metrics) and only to callers
// auth admits; without, plain HTTP to anyone (development only). /readyz
// answers anyone, token or not: it is kubelet's readiness probe, and says
// only ready (200) or not (503); why not is vgpud inspect's to tell.
func Serve(ctx context.Context, addr string, reg *prometheus.Registry, profiling bool, auth *Reviewer, ready func() (bool, string), log *slog.Logger) error {
	srv := &http.Server{Addr: addr, Handler: handler(reg, profiling, auth, ready), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, MaxHeaderBytes: 16 << 10}
	errc := make(chan error, 1)
	if auth != nil {
		cert, err := selfSigned()
		if err != nil {
			return err
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		go func() { errc <- srv.ListenAndServeTLS("", "") }()
		log.Info("serving metrics over HTTPS to authorized scrapers", "addr", addr)
	} else {
		go func() { errc <- srv.ListenAndServe() }()
		log.Warn("serving metrics over plain HTTP to anyone (--metrics-secure=false)", "addr", addr)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serve metrics on %s: %w", addr, err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// selfSigned is this process's metrics certificate, signed by a CA made
// for it and thrown away.
func selfSigned() (tls.Certificate, error) {
	host, _ := os.Hostname()
	// A replica may run for years on one certificate, made at its start.
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKeyWithOptions(certutil.SelfSignedCertKeyOptions{
		Host: host, AlternateDNS: []string{"localhost"}, MaxAge: 10 * 365 * 24 * time.Hour})
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("metrics certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("metrics certificate: %w", err)
	}
	return cert, nil
}

// handler is what Serve serves: /readyz to anyone, the rest behind auth
// when there is one.
func handler(reg *prometheus.Registry, profiling bool, auth *Reviewer, ready func() (bool, string)) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{MaxRequestsInFlight: 4}))
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	}
	var h http.Handler = mux
	if auth != nil {
		h = auth.Wrap(mux)
	}
	outer := http.NewServeMux()
	outer.Handle("/", h)
	outer.Handle("GET /readyz", readyz(ready))
	return outer
}

// readyz answers kubelet's readiness probe. A probe exec'd in the
// container would start a second vgpud every period, run its package
// initialisation and keep the whole binary's pages in the page cache,
// active and charged to the pod: 10 MiB more RSS and 16 MiB more working
// set on a node replica, measured.
func readyz(ready func() (bool, string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		// Anyone on the network may ask: the reason (socket paths, driver
		// errors) stays with vgpud inspect.
		if ok, _ := ready(); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready")
			return
		}
		fmt.Fprintln(w, "ok")
	})
}
