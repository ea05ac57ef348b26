//go:build bench

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// serveExtender answers /filter and /bind as thinly as an extender can:
// the same mutual TLS as vgpud's (its Secret's serving certificate and
// CA), each body decoded with encoding/json, the first candidate node
// taken, and a bind made with one plain Binding. What this process spends
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
	mux.HandleFunc("POST /filter", func(w http.ResponseWriter, r *http.Request) {
		var args struct{ NodeNames []string }
		if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		answer(w, map[string]any{"NodeNames": args.NodeNames[:min(1, len(args.NodeNames))]})
	})
	mux.HandleFunc("POST /bind", func(w http.ResponseWriter, r *http.Request) {
		var args struct {
			PodName, PodNamespace, Node string
			PodUID                      types.UID
		}
		if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out := map[string]string{}
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: args.PodName, Namespace: args.PodNamespace, UID: args.PodUID}, Target: corev1.ObjectReference{Kind: "Node", Name: args.Node}}
		if err := core.Pods(args.PodNamespace).Bind(r.Context(), b, metav1.CreateOptions{}); err != nil {
			out["Error"] = err.Error()
		}
		answer(w, out)
	})
	srv := &http.Server{Addr: addr, Handler: mux, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
	}}
	return srv.ListenAndServeTLS("", "")
}

func answer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
