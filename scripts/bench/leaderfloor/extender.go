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

// servingTLS is vgpud's serving certificate and CA, from its Secret: the
// floor serves with what vgpud serves with.
func servingTLS(ctx context.Context, core corev1client.CoreV1Interface) (tls.Certificate, *x509.CertPool, error) {
	s, err := core.Secrets("vgpud-system").Get(ctx, "vgpud-tls", metav1.GetOptions{})
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("read vgpud's TLS Secret: %w", err)
	}
	cert, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("vgpud's serving certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
		return tls.Certificate{}, nil, fmt.Errorf("vgpud's Secret holds no CA certificate")
	}
	return cert, pool, nil
}

// serveExtender answers /filter and /bind as thinly as an extender can
// (nullext, as the pipeline's floor does), over the same mutual TLS as
// vgpud's. What this process spends
// per pod is the machine's floor under the leader's CPU per pod: the
// transport, the decode and the write any extender pays, with none of
// vgpud's books, fit or fences.
func serveExtender(core corev1client.CoreV1Interface, cert tls.Certificate, clients *x509.CertPool, addr string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /filter", nullext.Filter)
	mux.HandleFunc("POST /bind", func(w http.ResponseWriter, r *http.Request) {
		if b, ok := nullext.Binding(w, r); ok {
			nullext.Bound(w, core.Pods(b.Namespace).Bind(r.Context(), b, metav1.CreateOptions{}))
		}
	})
	srv := &http.Server{Addr: addr, Handler: mux, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: clients, ClientAuth: tls.RequireAndVerifyClientCert,
	}}
	return srv.ListenAndServeTLS("", "")
}
