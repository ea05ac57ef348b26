package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/vgpud/vgpud/webhook/certs"
)

// The pieces as the cluster role wires them: the Manager's GetCertificate on
// an HTTPS listener serving NewHTTPHandler, called the way the apiserver
// does (trusting only the caBundle, naming the Service). A renewal is
// served on the next connection without restarting the listener.
func TestWebhookOverTLSWithManagedCert(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(&admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "vgpud"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "pods.vgpud.io"}},
	})
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	cfg := testConfig()
	m := certs.NewManager(cfg.Certs("vgpud-system"), kube, quietLog(), clock)
	if _, err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/webhook", NewHTTPHandler(NewPods(cfg, nil), quietLog()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{GetCertificate: m.GetCertificate, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })

	mwc, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "vgpud", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(mwc.Webhooks[0].ClientConfig.CABundle) {
		t.Fatal("caBundle holds no certificate")
	}
	_, body := readReview(t, "mem_only_adds_gpu")
	call := func(at time.Time) *x509.Certificate {
		t.Helper()
		client := &http.Client{Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: "vgpud.vgpud-system.svc", Time: func() time.Time { return at }},
		}}
		resp, err := client.Post("https://"+ln.Addr().String()+"/webhook", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		if !review.Response.Allowed || len(review.Response.Patch) == 0 {
			t.Fatalf("want a patch, got %+v", review.Response)
		}
		return resp.TLS.PeerCertificates[0]
	}
	first := call(now)

	later := now.Add(cfg.CertValidity - cfg.RenewBefore + time.Hour)
	mu.Lock()
	now = later
	mu.Unlock()
	if _, err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	second := call(later)
	if second.Equal(first) || !second.NotAfter.After(first.NotAfter) {
		t.Fatalf("after renewal the listener still serves the certificate ending %s", first.NotAfter)
	}
}
