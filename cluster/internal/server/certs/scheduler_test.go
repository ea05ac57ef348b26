package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"
)

// apiClock is the apiserver's clock as the Manager sees it: the time it
// stamps on each write of the Secret (managedFields) and on each pod it
// creates. The fake clientset stamps managedFields with the wall clock,
// which a test cannot move, so writes through stampedSecrets are
// stamped with this one instead.
type apiClock struct {
	mu     sync.Mutex
	at     time.Time
	stamps map[string]time.Time // by the Secret's resourceVersion
}

func (c *apiClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.at }
func (c *apiClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = c.at.Add(d)
}

func (c *apiClock) stamp(s *corev1.Secret, wrote bool) *corev1.Secret {
	if s == nil || s.Name == "" {
		return s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if wrote {
		c.stamps[s.ResourceVersion] = c.at
	}
	at, ok := c.stamps[s.ResourceVersion]
	if !ok {
		return s
	}
	mt := metav1.NewTime(at)
	s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "vgpud", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &mt}}
	return s
}

type stampedSecrets struct {
	corev1client.SecretsGetter
	clock *apiClock
}

func (g stampedSecrets) Secrets(namespace string) corev1client.SecretInterface {
	return stampedSecret{g.SecretsGetter.Secrets(namespace), g.clock}
}

type stampedSecret struct {
	corev1client.SecretInterface
	clock *apiClock
}

func (s stampedSecret) Get(ctx context.Context, name string, o metav1.GetOptions) (*corev1.Secret, error) {
	out, err := s.SecretInterface.Get(ctx, name, o)
	return s.clock.stamp(out, false), err
}

func (s stampedSecret) Create(ctx context.Context, in *corev1.Secret, o metav1.CreateOptions) (*corev1.Secret, error) {
	out, err := s.SecretInterface.Create(ctx, in, o)
	return s.clock.stamp(out, err == nil), err
}

// Update stores nothing on a dry run, as the apiserver, and stamps what
// it would have stored.
func (s stampedSecret) Update(ctx context.Context, in *corev1.Secret, o metav1.UpdateOptions) (*corev1.Secret, error) {
	if len(o.DryRun) > 0 {
		out := in.DeepCopy()
		mt := metav1.NewTime(s.clock.now())
		out.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "vgpud", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &mt}}
		return out, nil
	}
	out, err := s.SecretInterface.Update(ctx, in, o)
	return s.clock.stamp(out, err == nil), err
}

// schedulerDeployment is kube-scheduler's Deployment.
func schedulerDeployment(replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "vgpud-scheduler", Namespace: ns, Generation: 1},
		Spec:       appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "vgpud-scheduler"}}},
	}
}

// schedulerPod is a kube-scheduler pod of the Deployment's ReplicaSet,
// its container running.
func schedulerPod(name string, created time.Time, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(name), Labels: map[string]string{"app": "vgpud-scheduler"},
			CreationTimestamp: metav1.NewTime(created),
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "vgpud-scheduler-7cd5659959", UID: "rs", Controller: &yes}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}, ContainerStatuses: running()},
	}
}

func running() []corev1.ContainerStatus {
	return []corev1.ContainerStatus{{Name: "kube-scheduler", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
}

// schedulerPods stands in for the Deployment's ReplicaSet and kubelet:
// it starts kube-scheduler pods stamped with the apiserver's clock, each
// holding the files the Secret held when it started.
type schedulerPods struct {
	t     *testing.T
	kube  *fake.Clientset
	clock *apiClock
	n     int
	read  map[string]KeyPair // by pod: ca.crt (as Cert) and scheduler.crt (as Key)
}

func (p *schedulerPods) start(ready bool) string {
	p.t.Helper()
	p.n++
	name := fmt.Sprintf("vgpud-scheduler-%d", p.n)
	pod := schedulerPod(name, p.clock.now(), ready)
	if !ready {
		pod.Status.ContainerStatuses = nil // waiting for its volume
	}
	if _, err := p.kube.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		p.t.Fatal(err)
	}
	p.reread(name)
	return name
}

// reread has pod read the Secret's files (at install they come after
// the pod started).
func (p *schedulerPods) reread(pod string) {
	s, err := p.kube.CoreV1().Secrets(ns).Get(context.Background(), "vgpud-tls", metav1.GetOptions{})
	if err != nil {
		s = &corev1.Secret{} // not there yet
	}
	p.read[pod] = KeyPair{Cert: s.Data[KeyCACert], Key: s.Data[KeyClientCert]}
}

func (p *schedulerPods) ready(name string) {
	p.t.Helper()
	pods := p.kube.CoreV1().Pods(ns)
	pod, err := pods.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
	pod.Status.Conditions[0].Status = corev1.ConditionTrue
	pod.Status.ContainerStatuses = running()
	if _, err := pods.UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		p.t.Fatal(err)
	}
}

// names lists the pods there are now.
func (p *schedulerPods) names() []string {
	p.t.Helper()
	list, err := p.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
	var out []string
	for _, pod := range list.Items {
		out = append(out, pod.Name)
	}
	return out
}

// A CA rotation asked for on the Secret goes through its three steps, each
// only after kube-scheduler's pods were replaced by ones that read the
// previous step; at every step the served certificate verifies against
// the caBundle and the running pod's ca.crt, and its client certificate
// against what the extender trusts. The Deployment is never written.
func TestManagerRotatesTheCAWithoutAnOutage(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	kube := fake.NewClientset(webhookConfig(), schedulerDeployment(1))
	clock := &apiClock{at: t0, stamps: map[string]time.Time{}}
	api := apiOf(kube)
	api.Secrets = stampedSecrets{kube.CoreV1(), clock}
	cfg := testConfig
	cfg.SchedulerDeployment = "vgpud-scheduler"
	m := NewManager(cfg, api, quiet(), nowClock{now: func() time.Time { return t0 }})
	seen := &observed{}
	m.ObserveWith(seen)
	ctx := context.Background()
	pods := &schedulerPods{t: t, kube: kube, clock: clock, read: map[string]KeyPair{}}

	// Installed: the pod started before the Secret had keys, and reads
	// them when they come; nothing restarts it.
	first := pods.start(false)
	clock.advance(time.Second)
	if _, err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	pods.reread(first)
	pods.ready(first)
	s := secretOf(t, kube)
	if s.Annotations[AnnotationTrustHash] != TrustHash(s.Data[KeyCACert], s.Data[KeyClientCert]) || s.Annotations[AnnotationTrustSince] != sinceNone {
		t.Fatalf("after install the Secret records %q since %q", s.Annotations[AnnotationTrustHash], s.Annotations[AnnotationTrustSince])
	}
	oldCA := s.Data[KeyCACert]

	// ensure is one check of the manager, two seconds after the last
	// (the poll during a rotation); the ReplicaSet then replaces a
	// deleted pod with one not yet ready.
	ensure := func() {
		t.Helper()
		clock.advance(2 * time.Second)
		if _, err := m.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if len(pods.names()) == 0 {
			pods.start(false)
		}
	}
	running := func() string {
		t.Helper()
		names := pods.names()
		if len(names) != 1 {
			t.Fatalf("kube-scheduler pods: %v", names)
		}
		return names[0]
	}
	check := func(step string) {
		t.Helper()
		s := secretOf(t, kube)
		for _, b := range caBundles(t, kube) {
			served(t, m, b, t0)
		}
		pod := running()
		files := pods.read[pod]
		served(t, m, files.Cert, t0)
		cert, err := x509.ParseCertificate(mustPEM(t, files.Key))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: m.cert.Load().clients, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: t0}); err != nil {
			t.Fatalf("%s: %s's client certificate is not trusted by the extender: %v", step, pod, err)
		}
		t.Logf("%s: ca.crt holds %d CA(s); %s runs", step, len(splitPEM(s.Data[KeyCACert])), pod)
	}
	// restart checks that the running pod is replaced, and that until the
	// new one is ready the rotation waits.
	restart := func(step string) {
		t.Helper()
		old := running()
		ensure()
		next := running()
		if next == old {
			t.Fatalf("%s: %s not replaced", step, old)
		}
		before := secretOf(t, kube)
		ensure()
		if after := secretOf(t, kube); !bytes.Equal(after.Data[KeyCACert], before.Data[KeyCACert]) || !bytes.Equal(after.Data[KeyCert], before.Data[KeyCert]) {
			t.Fatalf("%s: a rotation step was taken before %s was ready", step, next)
		}
		pods.ready(next)
	}
	check("installed")
	s.Annotations[AnnotationRotateCA] = "now"
	if _, err := api.Secrets.Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Step 1: both CAs trusted, the old one still signs; the pod that
	// read the old files is deleted at the next check, not in the same.
	ensure()
	s = secretOf(t, kube)
	if got := splitPEM(s.Data[KeyCACert]); len(got) != 2 || !bytes.Equal(got[0], oldCA) || len(s.Data[KeyCANextKey]) == 0 || s.Annotations[AnnotationRotatedCA] != "now" {
		t.Fatalf("after the request: %d CAs, next key %d bytes, rotated %q", len(got), len(s.Data[KeyCANextKey]), s.Annotations[AnnotationRotatedCA])
	}
	if at, recorded, err := trustRecord(s, TrustHash(s.Data[KeyCACert], s.Data[KeyClientCert])); !recorded || err != nil || !at.After(t0) {
		t.Fatalf("the new trust is not recorded: %v", s.Annotations)
	}
	if running() != first {
		t.Fatal("kube-scheduler's pod deleted in the check that wrote its new files")
	}
	check("introducing, kube-scheduler not restarted")
	restart("introducing")
	check("introducing, kube-scheduler restarted")

	// Step 2: the new CA signs both certificates.
	ensure()
	s = secretOf(t, kube)
	if len(splitPEM(s.Data[KeyCACert])) != 2 || len(s.Data[KeyCANextKey]) != 0 {
		t.Fatal("switched step keeps both CAs and drops the next key")
	}
	check("switched, kube-scheduler not restarted")
	restart("switched")
	check("switched, kube-scheduler restarted")

	// Step 3: the old CA goes once kube-scheduler has the new client
	// certificate; its pod is replaced once more to drop it.
	ensure()
	check("steady, kube-scheduler not restarted")
	restart("steady")
	ensure()
	s = secretOf(t, kube)
	got := splitPEM(s.Data[KeyCACert])
	if len(got) != 1 || bytes.Equal(got[0], oldCA) {
		t.Fatalf("rotation did not end with the new CA alone: %d CAs", len(got))
	}
	if _, phase := readTrust(s.Data[KeyCACert], s.Data[KeyCAKey], s.Data[KeyCANextKey]); phase != steady {
		t.Fatalf("phase %v after the rotation", phase)
	}
	check("steady, kube-scheduler restarted")
	// Nothing more: the same request is not acted on twice, the pod that
	// read the last step stays.
	last := running()
	ensure()
	ensure()
	if after := secretOf(t, kube); !bytes.Equal(after.Data[KeyCACert], s.Data[KeyCACert]) || running() != last {
		t.Fatal("a second rotation or restart for the same request")
	}
	if strings.Join(seen.steps, ",") != "trusted,signing,retired" {
		t.Fatalf("rotation steps observed: %v", seen.steps)
	}
	if pods.n != 4 {
		t.Fatalf("%d kube-scheduler pods started; want the first and one per step", pods.n)
	}
	for _, a := range kube.Actions() {
		if a.GetResource().Resource == "deployments" && a.GetVerb() != "get" {
			t.Fatalf("the Deployment was written (%s): a GitOps sync would revert it", a.GetVerb())
		}
	}
}

func mustPEM(t *testing.T, b []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("no PEM block")
	}
	return block.Bytes
}

// With two replicas one pod goes at a time: a pod that is not ready
// first, a ready one only while no pod terminates and every other is
// ready. A pod created in the second the trust was recorded counts as
// older; one that failed runs nothing and is left to its ReplicaSet.
func TestReplaceOlderPodsOneAtATime(t *testing.T) {
	since := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	pod := func(name string, created time.Time, ready bool, mods ...func(*corev1.Pod)) *corev1.Pod {
		p := schedulerPod(name, created, ready)
		for _, f := range mods {
			f(p)
		}
		return p
	}
	terminating := func(p *corev1.Pod) { now := metav1.NewTime(since); p.DeletionTimestamp = &now }
	failed := func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }
	mirror := func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "n1"}}
	}
	older, sameSecond, newer := since.Add(-time.Hour), since.Add(900*time.Millisecond), since.Add(time.Second)
	for _, c := range []struct {
		name    string
		pods    []*corev1.Pod
		deleted string // "" for none
		runs    bool   // schedulerRunsWith, before any deletion
	}{
		{"both older and ready: one goes", []*corev1.Pod{pod("a", older, true), pod("b", older, true)}, "a", false},
		{"the one not ready goes first", []*corev1.Pod{pod("a", older, true), pod("b", older, false)}, "b", false},
		{"a ready one waits while another is not ready", []*corev1.Pod{pod("a", older, true), pod("b", newer, false)}, "", false},
		{"nothing goes while one terminates", []*corev1.Pod{pod("a", older, true), pod("b", newer, true, terminating)}, "", false},
		{"created in the recorded second: older", []*corev1.Pod{pod("a", sameSecond, true), pod("b", newer, true)}, "a", false},
		{"all newer and ready: done", []*corev1.Pod{pod("a", newer, true), pod("b", newer, true)}, "", true},
		{"a failed pod runs nothing", []*corev1.Pod{pod("a", newer, true), pod("b", newer, true), pod("c", older, false, failed)}, "", true},
		{"fewer pods than replicas: not done", []*corev1.Pod{pod("a", newer, true)}, "", false},
		{"a mirror pod with its labels is not one of them", []*corev1.Pod{pod("a", newer, true), pod("b", newer, true), pod("c", older, false, mirror)}, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			kube := fake.NewClientset(schedulerDeployment(2))
			for _, p := range c.pods {
				if _, err := kube.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			cfg := testConfig
			cfg.SchedulerDeployment = "vgpud-scheduler"
			m := NewManager(cfg, apiOf(kube), quiet(), clock.RealClock{})
			s := rotatingSecret(t, since)
			runs, err := m.schedulerRunsWith(context.Background(), s)
			if err != nil || runs != c.runs {
				t.Fatalf("schedulerRunsWith = %v, %v; want %v", runs, err, c.runs)
			}
			d := schedulerDeployment(2)
			pending, err := m.replaceOlderPods(context.Background(), d, since, "h")
			if err != nil {
				t.Fatal(err)
			}
			if (c.deleted != "" && !pending) || (c.runs && pending) {
				t.Errorf("pending %v after deleting %q, schedulerRunsWith %v", pending, c.deleted, c.runs)
			}
			var gone []string
			for _, p := range c.pods {
				if _, err := kube.CoreV1().Pods(ns).Get(context.Background(), p.Name, metav1.GetOptions{}); err != nil {
					gone = append(gone, p.Name)
				}
			}
			if strings.Join(gone, ",") != c.deleted {
				t.Fatalf("deleted %v, want %q", gone, c.deleted)
			}
		})
	}
}

// rotatingSecret is a Secret in the middle of a CA rotation whose trust
// was recorded at since.
func rotatingSecret(t *testing.T, since time.Time) *corev1.Secret {
	t.Helper()
	a, err := GenerateCA(since, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, err := GenerateCA(since, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca := append(append([]byte{}, a.Cert...), b.Cert...)
	client := []byte("client")
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "vgpud-tls", Namespace: ns, Annotations: map[string]string{
			AnnotationTrustHash: TrustHash(ca, client), AnnotationTrustSince: since.Format(time.RFC3339)}},
		Data: map[string][]byte{KeyCACert: ca, KeyCAKey: a.Key, KeyCANextKey: b.Key, KeyClientCert: client},
	}
}

// Without a record (at install, after the Secret was replaced or its
// record edited away, after an upgrade from v0.1.0) the pods tell: one
// whose container started holds what the Secret held then and is
// replaced, unless its v0.1.0 template named the same trust; one that
// never started reads the keys when it does. A record missing its time
// counts as none, so a rotation does not take a step on it.
func TestRecordTrustWithoutARecordAsksThePods(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	legacy := func(hash string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationTrustHash: hash} }
	}
	waiting := func(p *corev1.Pod) { p.Status.ContainerStatuses = nil }
	for _, c := range []struct {
		name   string
		record map[string]string
		pod    func(hash string) []func(*corev1.Pod)
		since  string // "" for a time
	}{
		{"no record, a pod running", nil, func(string) []func(*corev1.Pod) { return nil }, ""},
		{"no record, the pod waits for the keys", nil, func(string) []func(*corev1.Pod) { return []func(*corev1.Pod){waiting} }, sinceNone},
		{"no record, the pod's v0.1.0 template named this trust", nil, func(h string) []func(*corev1.Pod) { return []func(*corev1.Pod){legacy(h)} }, sinceNone},
		{"no record, the v0.1.0 template named older trust", nil, func(string) []func(*corev1.Pod) { return []func(*corev1.Pod){legacy("older")} }, ""},
		{"a record without its time", map[string]string{AnnotationTrustHash: "this"}, func(string) []func(*corev1.Pod) { return nil }, ""},
		{"a record of other trust", map[string]string{AnnotationTrustHash: "other", AnnotationTrustSince: sinceNone}, func(string) []func(*corev1.Pod) { return []func(*corev1.Pod){waiting} }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := rotatingSecret(t, at)
			hash := TrustHash(s.Data[KeyCACert], s.Data[KeyClientCert])
			s.Annotations = map[string]string{}
			for k, v := range c.record {
				if v == "this" {
					v = hash
				}
				s.Annotations[k] = v
			}
			kube := fake.NewClientset(schedulerDeployment(1), s, pod0(at.Add(-time.Hour), c.pod(hash)...))
			stamps := &apiClock{at: at.Add(time.Minute), stamps: map[string]time.Time{}}
			api := apiOf(kube)
			api.Secrets = stampedSecrets{kube.CoreV1(), stamps}
			cfg := testConfig
			cfg.SchedulerDeployment = "vgpud-scheduler"
			m := NewManager(cfg, api, quiet(), clock.RealClock{})
			if runs, err := m.schedulerRunsWith(context.Background(), s); runs || err != nil {
				t.Fatalf("a rotation step may be taken without a record: %v, %v", runs, err)
			}
			tr, ph := readTrust(s.Data[KeyCACert], s.Data[KeyCAKey], s.Data[KeyCANextKey])
			if _, err := m.restartScheduler(context.Background(), s, bundle{trust: tr, phase: ph, client: KeyPair{Cert: s.Data[KeyClientCert]}}); err != nil {
				t.Fatal(err)
			}
			got := secretOf(t, kube)
			want := c.since
			if want == "" {
				want = stamps.now().Format(time.RFC3339)
			}
			if got.Annotations[AnnotationTrustHash] != hash || got.Annotations[AnnotationTrustSince] != want {
				t.Fatalf("recorded %q since %q, want since %q", got.Annotations[AnnotationTrustHash], got.Annotations[AnnotationTrustSince], want)
			}
		})
	}
}

func pod0(created time.Time, mods ...func(*corev1.Pod)) *corev1.Pod {
	p := schedulerPod("vgpud-scheduler-0", created, true)
	for _, f := range mods {
		f(p)
	}
	return p
}
