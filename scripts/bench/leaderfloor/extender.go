//go:build bench

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/vgpud/vgpud/scripts/bench/nullext"
)

// serveExtender answers /filter and /bind as thinly as an extender can
// (nullext, as the pipeline's floor does), over the same mutual TLS as
// vgpud's (its Secret's serving certificate and CA). What this process spends
// per pod is the machine's floor under the leader's CPU per pod: the
// transport, the decode and the write any extender pays, with none of
// vgpud's books, fit or fences.
func serveExtender(ctx context.Context, core corev1client.CoreV1Interface, addr string) error {
	s, err := core.Secrets("vgpud-system").Get(ctx, "vgpud-tls", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read vgpud's TLS Secret: %w", err)
	}
	cert, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return fmt.Errorf("vgpud's serving certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
		return fmt.Errorf("vgpud's Secret holds no CA certificate")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /filter", nullext.Filter)
	mux.HandleFunc("POST /bind", func(w http.ResponseWriter, r *http.Request) {
		if b, ok := nullext.Binding(w, r); ok {
			nullext.Bound(w, core.Pods(b.Namespace).Bind(r.Context(), b, metav1.CreateOptions{}))
		}
	})
	srv := &http.Server{Addr: addr, Handler: mux, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
	}}
	return srv.ListenAndServeTLS("", "")
}
