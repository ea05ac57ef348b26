package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/cluster/internal/server/certs"
)

// The listener as the cluster role wires it: the Manager's GetCertificate
// behind Serve, called the way the apiserver calls the webhook (trusting
// only the caBundle, naming the Service). A renewal is served on the next
// connection without restarting the listener.
func TestListenerServesTheManagedCertAcrossRenewal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube := fake.NewClientset(&admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "vgpud"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "pods.vgpud.io"}},
	})
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	nowFn := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	cfg := certs.DefaultConfig()
	cfg.Namespace = "vgpud-system"
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := certs.NewManager(cfg, certs.API{Secrets: kube.CoreV1(), Pods: kube.CoreV1(), Deployments: kube.AppsV1(), Webhooks: kube.AdmissionregistrationV1()}, log, nowClock{now: nowFn})
	if _, err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}

	s := New("", m.WebhookTLS(), clock.RealClock{}, log)
	s.Handle("/webhook", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "admitted") }))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ctx, ln) }()

	mwc, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "vgpud", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(mwc.Webhooks[0].ClientConfig.CABundle) {
		t.Fatal("caBundle holds no certificate")
	}
	call := func(at time.Time) *x509.Certificate {
		t.Helper()
		client := &http.Client{Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: "vgpud.vgpud-system.svc", Time: func() time.Time { return at }},
		}}
		resp, err := client.Post("https://"+ln.Addr().String()+"/webhook", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != "admitted" {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		return resp.TLS.PeerCertificates[0]
	}
	first := call(now)

	later := now.Add(cfg.CertValidity - cfg.CertRenewBefore + time.Hour)
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

// Only kube-scheduler, presenting the client certificate the leader issued
// from its own CA, reaches the extender: no certificate, a certificate of
// another CA, or one of vgpud's CA under another name are all refused at
// the handshake, on every verb.
func TestExtenderListenerRequiresTheSchedulerCertificate(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube := fake.NewClientset()
	cfg := certs.DefaultConfig()
	cfg.Namespace = "vgpud-system"
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := certs.NewManager(cfg, certs.API{Secrets: kube.CoreV1(), Pods: kube.CoreV1(), Deployments: kube.AppsV1(), Webhooks: kube.AdmissionregistrationV1()}, log, clock.RealClock{})
	if _, err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	s := New("", m.ExtenderTLS(), clock.RealClock{}, log)
	for _, verb := range []string{"/filter", "/prioritize", "/bind"} {
		s.Handle(verb, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "served") }))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ctx, ln) }()

	secret, err := kube.CoreV1().Secrets("vgpud-system").Get(ctx, cfg.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(secret.Data[certs.KeyCACert])
	pair := func(p certs.KeyPair) []tls.Certificate {
		c, err := tls.X509KeyPair(p.Cert, p.Key)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{c}
	}
	now := time.Now()
	otherCA, _ := certs.GenerateCA(now, time.Hour)
	foreign, _ := certs.GenerateClient(otherCA, certs.ClientName, now, time.Hour)
	ours := certs.KeyPair{Cert: secret.Data[certs.KeyCACert], Key: secret.Data[certs.KeyCAKey]}
	impostor, _ := certs.GenerateClient(ours, "tenant", now, time.Hour)
	call := func(verb string, client []tls.Certificate) (string, error) {
		c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "vgpud.vgpud-system.svc", Certificates: client}}}
		resp, err := c.Post("https://"+ln.Addr().String()+verb, "application/json", nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}
	scheduler := pair(certs.KeyPair{Cert: secret.Data[certs.KeyClientCert], Key: secret.Data[certs.KeyClientKey]})
	for _, verb := range []string{"/filter", "/prioritize", "/bind"} {
		for name, client := range map[string][]tls.Certificate{"no certificate": nil, "another CA": pair(foreign), "vgpud's CA, not the scheduler": pair(impostor)} {
			if body, err := call(verb, client); err == nil {
				t.Errorf("%s with %s: served %q", verb, name, body)
			}
		}
		if body, err := call(verb, scheduler); err != nil || body != "served" {
			t.Errorf("%s with kube-scheduler's certificate: %q %v", verb, body, err)
		}
	}

	// kube-scheduler's transport (client-go's defaults, HTTP/2 allowed)
	// keeps one connection for every call: one handshake, not one a call.
	var handshakes atomic.Int32
	tlsCfg := &tls.Config{RootCAs: roots, ServerName: "vgpud.vgpud-system.svc", Certificates: scheduler,
		VerifyConnection: func(tls.ConnectionState) error { handshakes.Add(1); return nil }}
	c := &http.Client{Timeout: 3 * time.Second, Transport: utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: tlsCfg})}
	for range 5 {
		resp, err := c.Post("https://"+ln.Addr().String()+"/filter", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		// As kube-scheduler reads: a JSON decoder, not to EOF.
		_ = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("extender answered over %s; want HTTP/2", resp.Proto)
		}
	}
	if n := handshakes.Load(); n != 1 {
		t.Errorf("%d TLS handshakes for 5 calls; want 1", n)
	}
}

// nowClock is the real clock, but for Now, which the test sets.
type nowClock struct {
	clock.RealClock
	now func() time.Time
}

func (c nowClock) Now() time.Time { return c.now() }
