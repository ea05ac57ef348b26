package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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

// clock is a settable time for the Manager.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }
func quiet() *slog.Logger        { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
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
	clk := &clock{t: t0}
	m := NewManager(testConfig, apiOf(kube), quiet(), clk.now)

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
	m2 := NewManager(testConfig, apiOf(kube), quiet(), clk.now)
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
	m := NewManager(testConfig, apiOf(kube), quiet(), func() time.Time { return t0 })
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

	m := NewManager(testConfig, apiOf(kube), quiet(), func() time.Time { return t0 })
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
	m := NewManager(testConfig, apiOf(kube), quiet(), func() time.Time { return t0 })
	if _, err := m.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Ready(); err != nil {
		t.Fatal(err)
	}
}

func TestManagerReadyTurnsFalseAfterExpiry(t *testing.T) {
	clk := &clock{t: t0}
	m := NewManager(testConfig, apiOf(fake.NewClientset()), quiet(), clk.now)
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
	m := NewManager(testConfig, apiOf(fake.NewClientset(webhookConfig())), quiet(), time.Now)
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

// schedulerDeployment is kube-scheduler's Deployment, rolled out.
func schedulerDeployment() *appsv1.Deployment {
	one := int32(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "vgpud-scheduler", Namespace: ns},
		Spec:       appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "vgpud-scheduler"}}},
		Status:     appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1},
	}
}

// A CA rotation asked for on the Secret goes through its three steps, each
// only after kube-scheduler restarted with the previous one; at every step
// the served certificate verifies against the caBundle and kube-scheduler's
// ca.crt, and its client certificate against what the extender trusts.
func TestManagerRotatesTheCAWithoutAnOutage(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	kube := fake.NewClientset(webhookConfig(), schedulerDeployment())
	cfg := testConfig
	cfg.SchedulerDeployment = "vgpud-scheduler"
	m := NewManager(cfg, apiOf(kube), quiet(), func() time.Time { return t0 })
	seen := &observed{}
	m.ObserveWith(seen)
	ctx := context.Background()
	if _, err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if len(seen.steps) != 0 || seen.serving.IsZero() || !seen.serving.After(t0) || seen.ca.Before(seen.serving) {
		t.Fatalf("after install: steps %v, serving expires %v, CA %v", seen.steps, seen.serving, seen.ca)
	}
	deployments := kube.AppsV1().Deployments(ns)
	hash := func() string {
		d, err := deployments.Get(ctx, "vgpud-scheduler", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d.Spec.Template.Annotations[AnnotationTrustHash]
	}
	if h := hash(); h != "" {
		t.Fatalf("install restarted kube-scheduler (hash %q); its pods read the keys when they appear", h)
	}
	first := secretOf(t, kube)
	oldCA := first.Data[KeyCACert]

	// The scheduler's pods hold whatever the Secret held when they started.
	schedCA, schedClient := first.Data[KeyCACert], KeyPair{Cert: first.Data[KeyClientCert], Key: first.Data[KeyClientKey]}
	check := func(step string) {
		t.Helper()
		s := secretOf(t, kube)
		for _, b := range caBundles(t, kube) {
			served(t, m, b, t0)
		}
		served(t, m, schedCA, t0)
		l := m.cert.Load()
		cert, err := x509.ParseCertificate(mustPair(t, schedClient).Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: l.clients, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: t0}); err != nil {
			t.Fatalf("%s: kube-scheduler's client certificate is not trusted by the extender: %v", step, err)
		}
		t.Logf("%s: ca.crt holds %d CA(s)", step, len(splitPEM(s.Data[KeyCACert])))
	}
	setStatus := func(st appsv1.DeploymentStatus) {
		t.Helper()
		d, err := deployments.Get(ctx, "vgpud-scheduler", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d.Status = st
		if _, err := deployments.UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// ensure runs the manager; a changed pod template starts a rollout, as
	// the Deployment controller would.
	lastHash := ""
	ensure := func() {
		t.Helper()
		if _, err := m.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if h := hash(); h != lastHash {
			lastHash = h
			setStatus(appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 1, AvailableReplicas: 1})
		}
	}
	// schedulerPod is kube-scheduler's pod, started from the template
	// with hash h.
	schedulerPod := func(h string) {
		t.Helper()
		pods := kube.CoreV1().Pods(ns)
		_ = pods.Delete(ctx, "vgpud-scheduler-pod", metav1.DeleteOptions{})
		if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vgpud-scheduler-pod", Namespace: ns,
			Labels: map[string]string{"app": "vgpud-scheduler"}, Annotations: map[string]string{AnnotationTrustHash: h}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	schedulerPod("")
	// restart finishes the rollout: the pods read the Secret as it is. The
	// Deployment reports it done while the old pod still terminates; the
	// rotation must wait for the pod itself.
	restart := func() {
		t.Helper()
		setStatus(schedulerDeployment().Status)
		before := secretOf(t, kube)
		if _, err := m.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if after := secretOf(t, kube); !bytes.Equal(after.Data[KeyCACert], before.Data[KeyCACert]) || !bytes.Equal(after.Data[KeyCert], before.Data[KeyCert]) {
			t.Fatal("a rotation step was taken while the old kube-scheduler pod was still there")
		}
		schedulerPod(hash())
		s := secretOf(t, kube)
		schedCA = s.Data[KeyCACert]
		schedClient = KeyPair{Cert: s.Data[KeyClientCert], Key: s.Data[KeyClientKey]}
	}
	check("installed")

	s := first.DeepCopy()
	s.Annotations = map[string]string{AnnotationRotateCA: "now"}
	if _, err := kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Step 1: both CAs trusted, the old one still signs; kube-scheduler is
	// asked to restart, and until it has, nothing moves.
	for range 2 {
		ensure()
		check("introducing, kube-scheduler not restarted")
	}
	s = secretOf(t, kube)
	if got := splitPEM(s.Data[KeyCACert]); len(got) != 2 || !bytes.Equal(got[0], oldCA) || len(s.Data[KeyCANextKey]) == 0 || s.Annotations[AnnotationRotatedCA] != "now" {
		t.Fatalf("after the request: %d CAs, next key %d bytes, rotated %q", len(got), len(s.Data[KeyCANextKey]), s.Annotations[AnnotationRotatedCA])
	}
	if hash() != TrustHash(s.Data[KeyCACert], s.Data[KeyClientCert]) {
		t.Fatal("kube-scheduler not asked to restart with both CAs")
	}
	// Step 2 once it has: the new CA signs both certificates.
	restart()
	check("introducing, kube-scheduler restarted")
	for range 2 {
		ensure()
		check("switched, kube-scheduler not restarted")
	}
	s = secretOf(t, kube)
	if len(splitPEM(s.Data[KeyCACert])) != 2 || len(s.Data[KeyCANextKey]) != 0 {
		t.Fatal("switched step keeps both CAs and drops the next key")
	}
	// Step 3: the old CA goes once kube-scheduler has the new client certificate.
	restart()
	check("switched, kube-scheduler restarted")
	ensure()
	check("steady, kube-scheduler not restarted")
	restart()
	s = secretOf(t, kube)
	got := splitPEM(s.Data[KeyCACert])
	if len(got) != 1 || bytes.Equal(got[0], oldCA) {
		t.Fatalf("rotation did not end with the new CA alone: %d CAs", len(got))
	}
	if _, phase := readTrust(s.Data[KeyCACert], s.Data[KeyCAKey], s.Data[KeyCANextKey]); phase != steady {
		t.Fatalf("phase %v after the rotation", phase)
	}
	// The same request is not acted on twice.
	ensure()
	if after := secretOf(t, kube); !bytes.Equal(after.Data[KeyCACert], s.Data[KeyCACert]) {
		t.Fatal("a second rotation started for the same request")
	}
	if strings.Join(seen.steps, ",") != "trusted,signing,retired" {
		t.Fatalf("rotation steps observed: %v", seen.steps)
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
