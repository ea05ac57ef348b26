package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
)

const ns = "vgpud-system"

var testConfig = Config{
	Namespace:         ns,
	SecretName:        "vgpud-tls",
	WebhookConfigName: "vgpud",
	ServiceName:       "vgpud",
	CertValidity:      validity,
	CertRenewBefore:   renewBefore,
}

// settable is a settable time for the Manager.
type settable struct {
	mu sync.Mutex
	t  time.Time
}

func (c *settable) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *settable) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }
func quiet() *slog.Logger           { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
func webhookConfig() *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "vgpud"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "pods.vgpud.io"}, {Name: "other.vgpud.io"}},
	}
}

func secretOf(t *testing.T, kube *fake.Clientset) *corev1.Secret {
	t.Helper()
	s, err := kube.CoreV1().Secrets(ns).Get(context.Background(), "vgpud-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func caBundles(t *testing.T, kube *fake.Clientset) [][]byte {
	t.Helper()
	mwc, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "vgpud", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, w := range mwc.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out
}

// served returns the leaf the Manager hands to TLS, checked against the CA
// in the Secret for the Service's name.
func served(t *testing.T, m *Manager, caPEM []byte, at time.Time) *x509.Certificate {
	t.Helper()
	c, err := m.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "vgpud.vgpud-system.svc", CurrentTime: at}); err != nil {
		t.Fatalf("served certificate does not verify against the Secret's CA: %v", err)
	}
	return leaf
}

func TestManagerCreatesRenewsAndReuses(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(webhookConfig())
	clk := &settable{t: t0}
	m := NewManager(testConfig, apiOf(kube), quiet(), nowClock{now: clk.now})

	if m.Ready() == nil {
		t.Fatal("Ready before any certificate: want an error")
	}
	if _, err := m.GetCertificate(nil); err == nil {
		t.Fatal("GetCertificate before any certificate: want an error")
	}
	select {
	case <-m.Loaded():
		t.Fatal("Loaded before any certificate")
	default:
	}

	renew, err := m.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Loaded():
	default:
		t.Fatal("not Loaded after Ensure")
	}
	if want := t0.Add(validity - renewBefore); !renew.Equal(want) {
		t.Fatalf("renew at %s, want %s", renew, want)
	}
	s := secretOf(t, kube)
	for _, k := range []string{KeyCACert, KeyCAKey, KeyCert, KeyKey} {
		if len(s.Data[k]) == 0 {
			t.Fatalf("secret lacks %s", k)
		}
	}
	for i, b := range caBundles(t, kube) {
		if !bytes.Equal(b, s.Data[KeyCACert]) {
			t.Fatalf("webhook %d caBundle is not the Secret's ca.crt", i)
		}
	}
	if err := m.Ready(); err != nil {
		t.Fatalf("Ready after Ensure: %v", err)
	}
	first := served(t, m, s.Data[KeyCACert], t0)

	// A new leader with the same clock reuses everything: no writes.
	kube.ClearActions()
	m2 := NewManager(testConfig, apiOf(kube), quiet(), nowClock{now: clk.now})
	if _, err := m2.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	for _, a := range kube.Actions() {
		if a.GetVerb() != "get" {
			t.Fatalf("reuse wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if !served(t, m2, s.Data[KeyCACert], t0).Equal(first) {
		t.Fatal("second manager serves a different certificate")
	}

	// Near expiry: a new serving certificate from the same CA, swapped in
	// without a new Manager; the caBundle stays.
	near := t0.Add(validity - renewBefore + time.Hour)
	clk.set(near)
	if _, err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := secretOf(t, kube)
	if !bytes.Equal(s2.Data[KeyCACert], s.Data[KeyCACert]) {
		t.Fatal("renewal replaced the CA")
	}
	second := served(t, m, s2.Data[KeyCACert], near)
	if second.Equal(first) || !second.NotAfter.Equal(near.Add(validity)) {
		t.Fatalf("after renewal serving cert ends %s, want a new one ending %s", second.NotAfter, near.Add(validity))
	}
	if !bytes.Equal(caBundles(t, kube)[0], s.Data[KeyCACert]) {
		t.Fatal("caBundle changed on a serving-only renewal")
	}
}

func TestManagerReplacesExpiredAndRepairsCABundle(t *testing.T) {
	ctx := context.Background()
	oldCA := mustCA(t, t0.Add(-3*validity), validity)
	oldServing := mustServing(t, oldCA, DNSNames("vgpud", ns), t0.Add(-3*validity), validity)
	mwc := webhookConfig()
	mwc.Webhooks[0].ClientConfig.CABundle = oldCA.Cert
	kube := fake.NewClientset(mwc, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "vgpud-tls", Namespace: ns},
		Data:       map[string][]byte{KeyCACert: oldCA.Cert, KeyCAKey: oldCA.Key, KeyCert: oldServing.Cert, KeyKey: oldServing.Key},
	})
	m := NewManager(testConfig, apiOf(kube), quiet(), nowClock{now: func() time.Time { return t0 }})
	if _, err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	s := secretOf(t, kube)
	if bytes.Equal(s.Data[KeyCACert], oldCA.Cert) {
		t.Fatal("expired CA kept")
	}
	served(t, m, s.Data[KeyCACert], t0)
	for i, b := range caBundles(t, kube) {
		if !bytes.Equal(b, s.Data[KeyCACert]) {
			t.Fatalf("webhook %d still trusts the old CA", i)
		}
	}
}

func TestManagerAlreadyExistsRace(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(webhookConfig())
	// Another replica creates the Secret between our Get and our Create.
	theirCA := mustCA(t, t0, 10*validity)
	theirs := mustServing(t, theirCA, DNSNames("vgpud", ns), t0, validity)
	raced := false
	kube.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		err := kube.Tracker().Add(&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "vgpud-tls", Namespace: ns},
			Data:       map[string][]byte{KeyCACert: theirCA.Cert, KeyCAKey: theirCA.Key, KeyCert: theirs.Cert, KeyKey: theirs.Key},
		})
		if err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, "vgpud-tls")
	})
	// And the first caBundle write loses to a concurrent update.
	conflicted := false
	kube.PrependReactor("update", "mutatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicted {
			return false, nil, nil
		}
		conflicted = true
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "mutatingwebhookconfigurations"}, "vgpud", errors.New("changed"))
	})

	m := NewManager(testConfig, apiOf(kube), quiet(), nowClock{now: func() time.Time { return t0 }})
	if _, err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if !raced || !conflicted {
		t.Fatalf("reactors not reached: raced=%v conflicted=%v", raced, conflicted)
	}
	if s := secretOf(t, kube); !bytes.Equal(s.Data[KeyCert], theirs.Cert) {
		t.Fatal("the other replica's valid Secret was overwritten")
	}
	if !served(t, m, theirCA.Cert, t0).Equal(mustLeaf(t, theirs.Cert)) {
		t.Fatal("not serving the other replica's certificate")
	}
	for i, b := range caBundles(t, kube) {
		if !bytes.Equal(b, theirCA.Cert) {
			t.Fatalf("webhook %d caBundle is not the winning CA", i)
		}
	}
}

func mustLeaf(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	c, err := parseCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestManagerWithoutWebhookConfigStillServes(t *testing.T) {
	kube := fake.NewClientset()
	m := NewManager(testConfig, apiOf(kube), quiet(), nowClock{now: func() time.Time { return t0 }})
	if _, err := m.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Ready(); err != nil {
		t.Fatal(err)
	}
}

func TestManagerReadyTurnsFalseAfterExpiry(t *testing.T) {
	clk := &settable{t: t0}
	m := NewManager(testConfig, apiOf(fake.NewClientset()), quiet(), nowClock{now: clk.now})
	if _, err := m.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.set(t0.Add(validity + time.Second))
	if m.Ready() == nil {
		t.Fatal("Ready with an expired certificate: want an error")
	}
}

func TestManagerRunLoadsAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	m := NewManager(testConfig, apiOf(fake.NewClientset(webhookConfig())), quiet(), clock.RealClock{})
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return m.Ready() == nil, nil }); err != nil {
		t.Fatal("Run did not load a certificate within 5s")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
}

// observed records what an Observer is told.
type observed struct {
	steps               []string
	ca, serving, client time.Time
}

func (o *observed) Certificates(ca, serving, client time.Time) {
	o.ca, o.serving, o.client = ca, serving, client
}
func (o *observed) RotationStep(step string) { o.steps = append(o.steps, step) }

func mustPair(t *testing.T, p KeyPair) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// apiOf is the Manager's API on a fake clientset.
func apiOf(kube *fake.Clientset) API {
	return API{Secrets: kube.CoreV1(), Pods: kube.CoreV1(), Deployments: kube.AppsV1(), Webhooks: kube.AdmissionregistrationV1()}
}

// nowClock is the real clock, but for Now, which the test sets.
type nowClock struct {
	clock.RealClock
	now func() time.Time
}

func (c nowClock) Now() time.Time { return c.now() }
