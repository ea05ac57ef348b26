package extender

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vgpud/vgpud/cluster/internal/books"
	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func bindPod(name string, mem string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ai", UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: corev1.PodSpec{SchedulerName: "vgpud-scheduler", Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem": resource.MustParse(mem)},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

type bindEnv struct {
	kube   *fake.Clientset
	books  *books.Ledger
	limits fixedLimits
	// fences is how many more fence checks pass; negative: all of them.
	fences   atomic.Int32
	binder   *Binder
	bindings chan string
	// informer plays the leader's pod informer: namespace/name -> *Pod.
	informer sync.Map
	// clk is the binder's clock: the wall clock, or fake (withFakeClock).
	clk  clock.WithTicker
	fake *clocktesting.FakeClock
	// landing is a Binding that got no answer, to land when the test says.
	landing *corev1.Binding
	// term is the binder's term of leadership; the test's end ends it.
	term    context.Context
	endTerm context.CancelFunc
	// observed is each bind's "outcome/reason", as the metrics are told.
	observed chan string
}

// newFakeClockBindEnv is newBindEnv with a fake clock: the test steps
// time, so a hold or a wait ends exactly when the test says and never
// before.
func newFakeClockBindEnv(t testing.TB, split int, wait time.Duration, initial ...*corev1.Pod) *bindEnv {
	fc := clocktesting.NewFakeClock(time.Now())
	e := newBindEnvWithClock(t, fc, split, wait, initial...)
	e.fake = fc
	return e
}

func newBindEnv(t testing.TB, split int, wait time.Duration, initial ...*corev1.Pod) *bindEnv {
	return newBindEnvWithClock(t, clock.RealClock{}, split, wait, initial...)
}

// fixedLimits is a Limits of fixed hard limits per namespace.
type fixedLimits map[string]podmodel.Quota

func (f fixedLimits) NamespaceLimits(ns string) podmodel.Quota { return f[ns] }

// newBindEnv: one node "n1" with one 16000 MiB GPU shared by split.
// record is what the leader's informer stores for p.
func recordOf(p *corev1.Pod) *slimpod.Pod { return slimpod.Of(p, wellknown.DefaultResourceNames()) }

func newBindEnvWithClock(t testing.TB, clk clock.WithTicker, split int, wait time.Duration, initial ...*corev1.Pod) *bindEnv {
	t.Helper()
	objs := []runtime.Object{}
	for _, p := range initial {
		objs = append(objs, p)
	}
	kube := fake.NewClientset(objs...)
	e := &bindEnv{kube: kube, books: books.New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{}), limits: fixedLimits{}, bindings: make(chan string, 10), clk: clk, observed: make(chan string, 100)}
	e.fences.Store(-1)
	inv, _ := protocol.EncodeInventory(protocol.Inventory{GPUs: []protocol.GPU{{UUID: "GPU-0", Model: "A100", MemoryMiB: 16000, Cores: 100, Split: split, Healthy: true}}})
	e.books.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{wellknown.AnnotationGPUs: inv, wellknown.AnnotationPlugin: wellknown.PluginServing}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("10")}}})
	// The apiserver's Binding: under the UID and resourceVersion given,
	// it sets the node and copies the Binding's annotations onto the pod.
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		obj, err := kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		p := obj.(*corev1.Pod).DeepCopy()
		switch {
		case b.UID != "" && b.UID != p.UID, b.ResourceVersion != "" && b.ResourceVersion != p.ResourceVersion:
			return true, nil, apierrors.NewConflict(corev1.Resource("pods"), b.Name, errors.New("the object has been modified"))
		case p.Spec.NodeName != "":
			return true, nil, apierrors.NewConflict(corev1.Resource("pods/binding"), p.Name, fmt.Errorf("pod %s is already assigned to node %q", p.Name, p.Spec.NodeName))
		}
		p.Spec.NodeName = b.Target.Name
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		maps.Copy(p.Annotations, b.Annotations)
		if err := kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, b.Namespace); err != nil {
			return true, nil, err
		}
		select {
		case e.bindings <- b.Name + "@" + b.Target.Name:
		default: // the fuzz test binds more than anyone reads
		}
		return true, b, nil
	})
	lookup := func(ns, name string) *slimpod.Pod {
		if p, ok := e.informer.Load(ns + "/" + name); ok {
			return recordOf(p.(*corev1.Pod))
		}
		return nil
	}
	e.term, e.endTerm = context.WithCancel(context.Background())
	t.Cleanup(e.endTerm)
	e.binder = NewBinder(e.term, BindConfig{Names: wellknown.DefaultResourceNames(), Scheduler: "vgpud-scheduler", Policy: NewPolicy(Defaults{NodePolicy: podmodel.Binpack, GPUPolicy: podmodel.Spread, Options: fit.Options{DefaultMemPercent: 100}}), Wait: wait, UnansweredHold: time.Minute},
		BinderDeps{API: kube.CoreV1(), Books: e.books, Lookup: lookup, Limits: e.limits, Fence: e.fence, Clock: e.clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Observe: func(outcome, reason string, _ time.Duration) {
				select {
				case e.observed <- outcome + "/" + reason:
				default: // the fuzz test binds more than anyone reads
				}
			}})
	return e
}

// fence plays leader.Term.Fence: it passes e.fences more times.
func (e *bindEnv) fence() error {
	if e.fences.Load() < 0 {
		return nil
	}
	if e.fences.Add(-1) < 0 {
		e.fences.Store(0)
		return errors.New("this replica does not hold the leader Lease")
	}
	return nil
}

func (e *bindEnv) bind(name string) string {
	body := fmt.Sprintf(`{"PodName":%q,"PodNamespace":"ai","PodUID":"uid-%s","Node":"n1"}`, name, name)
	w := httptest.NewRecorder()
	BindHandler(e.binder)(w, httptest.NewRequest(http.MethodPost, "/bind", strings.NewReader(body)))
	var res extenderv1.ExtenderBindingResult
	if w.Code != 200 {
		return fmt.Sprintf("HTTP %d: %s", w.Code, w.Body)
	}
	_ = json.Unmarshal(w.Body.Bytes(), &res)
	return res.Error
}

// allocated plays the node role: kubelet allocated the pod.
func (e *bindEnv) allocated(t *testing.T, name string) {
	t.Helper()
	p, err := e.kube.CoreV1().Pods("ai").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseAllocated)
	if err := e.books.SetPod(recordOf(p)); err != nil {
		t.Fatal(err)
	}
}

func (e *bindEnv) usedMiB() int64 {
	n, _ := e.books.Node("n1")
	return n.GPUs[0].Used.MemMiB
}

func TestBindWritesAssignmentBooksAndBinds(t *testing.T) {
	e := newBindEnv(t, 10, time.Second, bindPod("p1", "4000"))
	if msg := e.bind("p1"); msg != "" {
		t.Fatal(msg)
	}
	if got := <-e.bindings; got != "p1@n1" {
		t.Fatalf("binding %s", got)
	}
	p, _ := e.kube.CoreV1().Pods("ai").Get(context.Background(), "p1", metav1.GetOptions{})
	a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
	if err != nil || a.Node != "n1" || a.Containers[0].GPUs[0].MemoryMiB != 4000 || p.Annotations[wellknown.AnnotationPhase] != "bound" {
		t.Fatalf("annotations %v: %v", p.Annotations, err)
	}
	if e.usedMiB() != 4000 {
		t.Fatalf("cache not updated at once: %d MiB", e.usedMiB())
	}
}

func TestBindWaitsWhileAnotherPodIsInFlight(t *testing.T) {
	const bindWait = 200 * time.Millisecond
	e := newFakeClockBindEnv(t, 10, bindWait, bindPod("p1", "4000"), bindPod("p2", "3000"))
	if msg := e.bind("p1"); msg != "" {
		t.Fatal(msg)
	}
	// While it waits, p2's bind counts as queued on the node (prioritize
	// reads it); it gives up exactly when --bind-wait runs out.
	answer := make(chan string, 1)
	go func() { answer <- e.bind("p2") }()
	e.waitForTimers(t, 2) // its deadline, and its look again
	if q := e.binder.Queued("n1"); q != 1 {
		t.Errorf("binds queued on n1 while p2 waits: %d, want 1", q)
	}
	e.fake.Step(bindWait - time.Nanosecond)
	select {
	case msg := <-answer:
		t.Fatalf("gave up before --bind-wait ran out: %q", msg)
	default:
	}
	e.fake.Step(time.Nanosecond)
	if msg := <-answer; !strings.Contains(msg, "pod ai/p1 is bound but kubelet has not allocated") {
		t.Fatalf("second bind while p1 in flight: %q", msg)
	}
	// Once kubelet has allocated p1, the waiting bind goes through at
	// once, with no time passing.
	go func() { answer <- e.bind("p2") }()
	e.waitForTimers(t, 2)
	e.allocated(t, "p1")
	if msg := <-answer; msg != "" {
		t.Fatal(msg)
	}
	if q := e.binder.Queued("n1"); q != 0 {
		t.Errorf("binds queued on n1 after: %d, want 0", q)
	}
	if e.usedMiB() != 7000 {
		t.Fatalf("usage %d", e.usedMiB())
	}
}

// With the pod in the informer, a bind reads nothing from the apiserver:
// its one write is the Binding, which carries the assignment.
func TestBindUsesTheInformersCopy(t *testing.T) {
	e := newBindEnv(t, 10, time.Second, bindPod("p1", "4000"))
	p, err := e.kube.CoreV1().Pods("ai").Get(context.Background(), "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.informer.Store("ai/p1", p)
	e.kube.ClearActions()
	if msg := e.bind("p1"); msg != "" {
		t.Fatal(msg)
	}
	var verbs []string
	for _, a := range e.kube.Actions() {
		verbs = append(verbs, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
	}
	if !slices.Equal(verbs, []string{"create pods/binding"}) {
		t.Errorf("API calls of one bind: %v, want the Binding alone", verbs)
	}
}

// A stale informer copy costs a conflict on the Binding; the pod is then
// read afresh and bound.
func TestBindAfterAStaleInformerCopy(t *testing.T) {
	e := newBindEnv(t, 10, time.Second, bindPod("p1", "4000"))
	p, _ := e.kube.CoreV1().Pods("ai").Get(context.Background(), "p1", metav1.GetOptions{})
	stale := p.DeepCopy()
	stale.ResourceVersion = "1"
	e.informer.Store("ai/p1", stale)
	p.ResourceVersion = "2"
	if _, err := e.kube.CoreV1().Pods("ai").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	binds := 0
	e.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" {
			binds++
		}
		return false, nil, nil
	})
	e.kube.ClearActions()
	if msg := e.bind("p1"); msg != "" {
		t.Fatal(msg)
	}
	gets := 0
	for _, a := range e.kube.Actions() {
		if a.GetVerb() == "get" {
			gets++
		}
	}
	if binds != 2 || gets != 1 || e.usedMiB() != 4000 {
		t.Errorf("%d Bindings, %d reads, %d MiB booked; want 2, 1, 4000", binds, gets, e.usedMiB())
	}
}

func TestBindConflictLeaksNothing(t *testing.T) {
	e := newBindEnv(t, 10, time.Second, bindPod("p1", "4000"))
	e.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewConflict(corev1.Resource("pods"), "p1", errors.New("the object has been modified"))
	})
	if msg := e.bind("p1"); !strings.Contains(msg, "bind pod ai/p1 to n1") || !strings.Contains(msg, "modified") {
		t.Fatalf("conflict: %q", msg)
	}
	if e.usedMiB() != 0 || len(e.books.Pods()) != 0 {
		t.Fatalf("leaked usage %d, pods %v", e.usedMiB(), e.books.Pods())
	}
}

func TestBindDeletedPod(t *testing.T) {
	e := newBindEnv(t, 10, time.Second)
	if msg := e.bind("gone"); msg != "pod ai/gone no longer exists" {
		t.Fatalf("%q", msg)
	}
}

// A Binding the apiserver refused writes nothing, and the booking goes
// with it.
func TestFailedBindingLeavesNothing(t *testing.T) {
	e := newBindEnv(t, 10, time.Second, bindPod("p1", "4000"))
	e.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" {
			return true, nil, apierrors.NewBadRequest("node n1 is gone")
		}
		return false, nil, nil
	})
	if msg := e.bind("p1"); !strings.Contains(msg, "bind pod ai/p1 to n1: node n1 is gone") {
		t.Fatalf("%q", msg)
	}
	p, _ := e.kube.CoreV1().Pods("ai").Get(context.Background(), "p1", metav1.GetOptions{})
	if _, ok := p.Annotations[wellknown.AnnotationAssignment]; ok || e.usedMiB() != 0 || len(e.books.Pods()) != 0 {
		t.Fatalf("left behind: annotations %v, usage %d, books %v", p.Annotations, e.usedMiB(), e.books.Pods())
	}
}

// TestRaceForTheLastSlot: two binds race for a GPU with one slot left;
// exactly one wins, the other gets a clear error, the books hold one.
func TestRaceForTheLastSlot(t *testing.T) {
	e := newFakeClockBindEnv(t, 1, 300*time.Millisecond, bindPod("p1", "4000"), bindPod("p2", "4000"))
	var wg sync.WaitGroup
	msgs := make([]string, 2)
	for i, name := range []string{"p1", "p2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs[i] = e.bind(name)
		}()
	}
	// Whoever wins is allocated by kubelet while the loser waits (no time
	// passes: it waits as long as it takes), so the loser re-fits on
	// current state and finds the slot taken.
	select {
	case b := <-e.bindings:
		winner, _, _ := strings.Cut(b, "@")
		e.allocated(t, winner)
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("neither bind bound its pod")
	}
	wg.Wait()
	wins, losses := 0, 0
	for _, m := range msgs {
		switch {
		case m == "":
			wins++
		case strings.Contains(m, "no longer fits") && strings.Contains(m, "split limit"):
			losses++
		default:
			t.Errorf("unexpected answer %q", m)
		}
	}
	if wins != 1 || losses != 1 || len(e.books.Pods()) != 1 || e.usedMiB() != 4000 {
		t.Fatalf("wins %d losses %d books %v usage %d (%q)", wins, losses, e.books.Pods(), e.usedMiB(), msgs)
	}
}

func TestBindBadInput(t *testing.T) {
	e := newBindEnv(t, 10, time.Second)
	for body, want := range map[string]string{`{`: "malformed", `{"PodName":"x"}`: "needs PodName, PodNamespace and Node"} {
		w := httptest.NewRecorder()
		BindHandler(e.binder)(w, httptest.NewRequest(http.MethodPost, "/bind", strings.NewReader(body)))
		if w.Code != 400 || !strings.Contains(w.Body.String(), want) {
			t.Errorf("%s: %d %s", body, w.Code, w.Body)
		}
	}
}

// A rogue /bind (a caller that is not kube-scheduler, or a replay) is
// refused for every pod kube-scheduler's vgpud profile would never send,
// and leaves the books and the pod as they were.
func TestBindRefusesWhatTheSchedulerWouldNeverAsk(t *testing.T) {
	running := bindPod("running", "4000")
	running.Spec.NodeName = "n1"
	other := bindPod("other", "4000")
	other.Spec.SchedulerName = "default-scheduler"
	// An assignment on a pod without a node, which vgpud never writes:
	// readable or not, it is not bound over. (The apiserver refuses it from
	// anyone but vgpud.)
	raw, _ := protocol.EncodeAssignment(protocol.Assignment{Node: "n1", Containers: []protocol.ContainerAssignment{{Name: "main", GPUs: []protocol.GPUSlice{{UUID: "GPU-0", MemoryMiB: 4000}}}}})
	allocated := bindPod("allocated", "4000")
	allocated.Annotations = map[string]string{wellknown.AnnotationAssignment: raw, wellknown.AnnotationPhase: string(protocol.PhaseAllocated)}
	garbled := bindPod("garbled", "4000")
	garbled.Annotations = map[string]string{wellknown.AnnotationAssignment: "{", wellknown.AnnotationPhase: string(protocol.PhaseBound)}
	e := newBindEnv(t, 10, time.Second, running, other, allocated, garbled, bindPod("fresh", "4000"))
	for _, tc := range []struct{ body, want string }{
		{`{"PodName":"allocated","PodNamespace":"ai","PodUID":"uid-allocated","Node":"n1"}`, "carries a vgpud.io/assignment annotation but no node"},
		{`{"PodName":"garbled","PodNamespace":"ai","PodUID":"uid-garbled","Node":"n1"}`, "carries a vgpud.io/assignment annotation but no node"},
		{`{"PodName":"fresh","PodNamespace":"ai","Node":"n1"}`, "no PodUID"},
		{`{"PodName":"fresh","PodNamespace":"ai","PodUID":"uid-old","Node":"n1"}`, "was recreated"},
		{`{"PodName":"running","PodNamespace":"ai","PodUID":"uid-running","Node":"n1"}`, "already bound to n1"},
		{`{"PodName":"other","PodNamespace":"ai","PodUID":"uid-other","Node":"n1"}`, `schedulerName "default-scheduler"`},
	} {
		w := httptest.NewRecorder()
		BindHandler(e.binder)(w, httptest.NewRequest(http.MethodPost, "/bind", strings.NewReader(tc.body)))
		var res extenderv1.ExtenderBindingResult
		_ = json.Unmarshal(w.Body.Bytes(), &res)
		if !strings.Contains(res.Error, tc.want) {
			t.Errorf("%s: error %q, want %q", tc.body, res.Error, tc.want)
		}
	}
	if e.usedMiB() != 0 || len(e.books.Pods()) != 0 || len(e.bindings) != 0 {
		t.Fatalf("a refused bind booked or bound: usage %d, pods %v", e.usedMiB(), e.books.Pods())
	}
	p, _ := e.kube.CoreV1().Pods("ai").Get(context.Background(), "running", metav1.GetOptions{})
	if _, ok := p.Annotations[wellknown.AnnotationAssignment]; ok {
		t.Fatal("a refused bind wrote an assignment on the running pod")
	}
	p, _ = e.kube.CoreV1().Pods("ai").Get(context.Background(), "allocated", metav1.GetOptions{})
	if p.Annotations[wellknown.AnnotationAssignment] != raw {
		t.Fatal("a refused bind changed the assignment it refused to bind over")
	}
}

// Binds in one namespace are serialised for its quota: pods asking a
// whole card each (the default) race to different nodes against a quota
// that fits one card, and exactly one is bound. Each bind is slowed
// between its quota check and its booking, so without the namespace lock
// every bind would read the usage before any booked.
func TestConcurrentBindsHoldTheQuota(t *testing.T) {
	const n = 6
	var pods []*corev1.Pod
	for i := range n {
		p := bindPod(fmt.Sprintf("w%d", i), "1")
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")} // whole card
		pods = append(pods, p)
	}
	e := newBindEnv(t, 10, time.Second, pods...)
	e.limits["ai"] = podmodel.Quota{Memory: podmodel.Limit{Set: true, Hard: 16000}}
	inv, _ := protocol.EncodeInventory(protocol.Inventory{GPUs: []protocol.GPU{{UUID: "GPU-x", Model: "A100", MemoryMiB: 16000, Cores: 100, Split: 10, Healthy: true}}})
	for i := range n {
		inv := strings.Replace(inv, "GPU-x", fmt.Sprintf("GPU-n%d", i), 1)
		e.books.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("m%d", i), Annotations: map[string]string{wellknown.AnnotationGPUs: inv, wellknown.AnnotationPlugin: wellknown.PluginServing}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("10")}}})
	}
	// The slow step sits between the quota check and the booking, outside
	// the fake clientset (which serialises every call under its own lock):
	// the first bind to reach it stays there until every other bind has
	// come up to the namespace's quota lock (each reads the limits first).
	// Without the lock they would go on to read the usage before it
	// booked, and wait behind it here.
	limits := &countedLimits{Limits: e.limits}
	first, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	slow := func() error {
		once.Do(func() { close(first); <-release })
		return nil
	}
	binder := NewBinder(e.term, e.binder.cfg, BinderDeps{API: e.kube.CoreV1(), Books: e.books, Limits: limits, Fence: slow, Clock: e.clk, Log: quietLogger()})
	errs := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"PodName":"w%d","PodNamespace":"ai","PodUID":"uid-w%d","Node":"m%d"}`, i, i, i)
			w := httptest.NewRecorder()
			BindHandler(binder)(w, httptest.NewRequest(http.MethodPost, "/bind", strings.NewReader(body)))
			var res extenderv1.ExtenderBindingResult
			_ = json.Unmarshal(w.Body.Bytes(), &res)
			errs[i] = res.Error
		})
	}
	select {
	case <-first:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no bind reached its booking")
	}
	// The first read the limits twice (at the lock and in the check), each
	// other bind once, at the lock.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { return limits.reads.Load() >= n+1, nil }); err != nil {
		t.Fatalf("the limits were read %d times, want %d", limits.reads.Load(), n+1)
	}
	close(release)
	wg.Wait()
	bound := 0
	for i, msg := range errs {
		switch {
		case msg == "":
			bound++
		case !strings.Contains(msg, "gpumem quota 16000 MiB, in use 16000, this pod is charged 16000"):
			t.Errorf("w%d: %q, want the quota named", i, msg)
		}
	}
	if bound != 1 || len(e.books.Pods()) != 1 {
		t.Fatalf("%d bound, books %v; want exactly one", bound, e.books.Pods())
	}
}

// countedLimits counts the reads of Limits.
type countedLimits struct {
	Limits
	reads atomic.Int32
}

func (c *countedLimits) NamespaceLimits(ns string) podmodel.Quota {
	c.reads.Add(1)
	return c.Limits.NamespaceLimits(ns)
}

// Quota is checked at bind against the books, in MiB of the GPU chosen:
// a percentage or whole-card request counts in full.
func TestBindEnforcesNamespaceQuota(t *testing.T) {
	half := bindPod("half", "1")
	half.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem-percentage": resource.MustParse("50")}
	e := newBindEnv(t, 10, time.Second, bindPod("p1", "4000"), bindPod("p2", "4000"), half)
	e.limits["ai"] = podmodel.Quota{Memory: podmodel.Limit{Set: true, Hard: 10000}}
	if msg := e.bind("p1"); msg != "" {
		t.Fatal(msg)
	}
	<-e.bindings
	e.allocated(t, "p1")
	// 8000 MiB (half of the 16000 MiB GPU) on top of 4000 > 10000.
	if msg := e.bind("half"); !strings.Contains(msg, "gpumem quota 10000 MiB, in use 4000, this pod is charged 8000") {
		t.Fatalf("percentage request: %q", msg)
	}
	if msg := e.bind("p2"); msg != "" {
		t.Fatalf("p2 fits the quota: %q", msg)
	}
	<-e.bindings
	e.allocated(t, "p2")
	if msg := e.bind("half"); !strings.Contains(msg, "in use 8000") {
		t.Fatalf("quota after p2: %q", msg)
	}
	if got := len(e.books.Pods()); got != 2 {
		t.Fatalf("books %v, want p1 and p2", e.books.Pods())
	}
}

// What the namespace's DRA claims are charged (NamespaceLimits' Used)
// counts at bind beside its pods: claims and pods share one quota.
func TestBindCountsTheNamespacesClaims(t *testing.T) {
	e := newBindEnv(t, 10, time.Second, bindPod("p1", "4000"), bindPod("p2", "4000"))
	e.limits["ai"] = podmodel.Quota{Memory: podmodel.Limit{Set: true, Hard: 10000, Used: 3000}}
	if msg := e.bind("p1"); msg != "" {
		t.Fatal(msg)
	}
	<-e.bindings
	e.allocated(t, "p1")
	if msg := e.bind("p2"); !strings.Contains(msg, "gpumem quota 10000 MiB, in use 7000, this pod is charged 4000") {
		t.Fatalf("p2 beside 3000 MiB of claims and p1: %q", msg)
	}
}

// A GPU held whole (every core) is charged its whole memory, at bind and
// in the books after, however little memory the pod names: four pods
// asking 1 MiB and 100 cores once held four GPUs for 4 MiB of quota.
func TestBindChargesAnExclusiveGPUItsWholeMemory(t *testing.T) {
	excl := func(name string) *corev1.Pod {
		p := bindPod(name, "1")
		p.Spec.Containers[0].Resources.Limits["nvidia.com/gpucores"] = resource.MustParse("100")
		return p
	}
	e := newBindEnv(t, 10, time.Second, excl("x1"), excl("x2"))
	e.limits["ai"] = podmodel.Quota{Memory: podmodel.Limit{Set: true, Hard: 3000}}
	if msg := e.bind("x2"); !strings.Contains(msg, "gpumem quota 3000 MiB, in use 0, this pod is charged 16000, a GPU with all its cores (nvidia.com/gpucores 100) counting its whole memory") {
		t.Fatalf("exclusive pod under a 3000 MiB quota: %q", msg)
	}
	e.limits["ai"] = podmodel.Quota{Memory: podmodel.Limit{Set: true, Hard: 20000}}
	if msg := e.bind("x1"); msg != "" {
		t.Fatal(msg)
	}
	<-e.bindings
	e.allocated(t, "x1")
	if got := usedMiB(e.books.NamespaceUsage("ai", "")); got != 16000 {
		t.Fatalf("the books charge the exclusive pod %d MiB, want the GPU's 16000", got)
	}
}

// A leader that has lost the Lease commits nothing: not the assignment,
// and, if it loses it between the two writes, not the Binding either; the
// assignment it wrote is taken back.
func TestBindIsFencedByLeadership(t *testing.T) {
	e := newBindEnv(t, 10, time.Second, bindPod("p1", "4000"))
	e.fences.Store(0)
	if msg := e.bind("p1"); !strings.Contains(msg, "does not hold the leader Lease") {
		t.Fatalf("bind without the Lease: %q", msg)
	}
	p, _ := e.kube.CoreV1().Pods("ai").Get(context.Background(), "p1", metav1.GetOptions{})
	if _, ok := p.Annotations[wellknown.AnnotationAssignment]; ok || len(e.bindings) != 0 || len(e.books.Pods()) != 0 {
		t.Fatalf("wrote without the Lease: %v, bindings %d, books %v", p.Annotations, len(e.bindings), e.books.Pods())
	}
	e.fences.Store(1) // one check: the Binding is the bind's one write
	if msg := e.bind("p1"); msg != "" {
		t.Fatalf("bind with the Lease: %q", msg)
	}
}

// A Binding that answered with an error but landed (a timeout) is a
// success: the pod runs there, so its assignment stays.
func TestBindingErrorButBoundIsKept(t *testing.T) {
	e := newBindEnv(t, 10, time.Second, bindPod("p1", "4000"))
	e.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		p, err := e.kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "ai", "p1")
		if err != nil {
			return true, nil, err
		}
		bound := p.(*corev1.Pod).DeepCopy()
		bound.Spec.NodeName = "n1"
		if bound.Annotations == nil {
			bound.Annotations = map[string]string{}
		}
		maps.Copy(bound.Annotations, a.(k8stesting.CreateAction).GetObject().(*corev1.Binding).Annotations)
		if err := e.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), bound, "ai"); err != nil {
			return true, nil, err
		}
		return true, nil, context.DeadlineExceeded
	})
	if msg := e.bind("p1"); msg != "" {
		t.Fatalf("bind: %q", msg)
	}
	p, _ := e.kube.CoreV1().Pods("ai").Get(context.Background(), "p1", metav1.GetOptions{})
	if _, ok := p.Annotations[wellknown.AnnotationAssignment]; !ok || e.usedMiB() != 4000 {
		t.Fatalf("a bound pod lost its assignment: %v, usage %d", p.Annotations, e.usedMiB())
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A bind that waits for the node's in-flight pod books its room as it
// arrives: a filter meanwhile counts it, so kube-scheduler sends no second
// pod into the same last room only to have that bind refused ("no longer
// fits") and retried. If the wait runs out, the room is given back; once
// the node is free the pod binds into it.
func TestQueuedBindReservesItsRoom(t *testing.T) {
	const bindWait = 300 * time.Millisecond
	p1, p2, p3 := bindPod("p1", "4000"), bindPod("p2", "10000"), bindPod("p3", "4000")
	e := newFakeClockBindEnv(t, 10, bindWait, p1, p2, p3)
	for _, p := range []*corev1.Pod{p1, p2, p3} {
		e.informer.Store("ai/"+p.Name, p.DeepCopy())
	}
	placer := NewPlacer(e.books, e.binder, wellknown.DefaultResourceNames(), e.binder.cfg.Policy, nil, nil, quietLogger())
	filterP3 := func() (bool, string) {
		fits, failed, err := placer.Filter(context.Background(), recordOf(p3), []string{"n1"})
		if err != nil {
			t.Fatal(err)
		}
		return len(fits) == 1, failed["n1"]
	}
	if msg := e.bind("p1"); msg != "" {
		t.Fatal(msg)
	}
	<-e.bindings // p1 is in flight until kubelet allocates it
	done := make(chan string, 1)
	go func() { done <- e.bind("p2") }()
	e.waitForTimers(t, 2) // p2's bind waits for p1: its deadline and its look again
	if e.usedMiB() != 14000 {
		t.Fatalf("p2's bind is waiting for p1 and its 10000 MiB are not booked: %d MiB", e.usedMiB())
	}
	if e.binder.Queued("n1") != 1 || len(e.bindings) != 0 {
		t.Fatalf("p2 not waiting: %d queued, %d bindings", e.binder.Queued("n1"), len(e.bindings))
	}
	if fits, why := filterP3(); fits || !strings.Contains(why, "largest free 2000 MiB") {
		t.Fatalf("p3 filtered onto the room p2 waits for: fits %v, reason %q", fits, why)
	}
	e.fake.Step(bindWait)
	if msg := <-done; !strings.Contains(msg, "pod ai/p1 is bound but kubelet has not allocated") {
		t.Fatalf("p2 after the wait: %q", msg)
	}
	if e.usedMiB() != 4000 || len(e.books.Pods()) != 1 {
		t.Fatalf("the wait ran out and p2's room is still booked: %d MiB, %v", e.usedMiB(), e.books.Pods())
	}
	if fits, why := filterP3(); !fits {
		t.Fatalf("p3 refused once p2 gave its room back: %q", why)
	}
	e.allocated(t, "p1")
	if msg := e.bind("p2"); msg != "" {
		t.Fatal(msg)
	}
	if got := <-e.bindings; got != "p2@n1" || e.usedMiB() != 14000 {
		t.Fatalf("binding %s, %d MiB booked", got, e.usedMiB())
	}
}

// A pod deleted and created again under its name while its bind waits:
// the bind finds it recreated and fails, and takes back exactly what it
// booked, for the old pod; the new one holds nothing until bound itself.
func TestBindOfARecreatedPodLeavesNothingBooked(t *testing.T) {
	p1, p2 := bindPod("p1", "4000"), bindPod("p2", "4000")
	e := newFakeClockBindEnv(t, 10, 2*time.Second, p1, p2)
	e.informer.Store("ai/p2", p2.DeepCopy())
	if msg := e.bind("p1"); msg != "" {
		t.Fatal(msg)
	}
	<-e.bindings
	done := make(chan string, 1)
	go func() { done <- e.bind("p2") }()
	e.waitForTimers(t, 2) // p2's bind waits for p1
	if e.usedMiB() != 8000 {
		t.Fatalf("p2's bind did not book its room while waiting: %d MiB", e.usedMiB())
	}
	// p2 goes, and comes back as a new pod; the informer sees both.
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	if err := e.kube.Tracker().Delete(gvr, "ai", "p2"); err != nil {
		t.Fatal(err)
	}
	e.books.DeletePod(p2.UID)
	again := bindPod("p2", "4000")
	again.UID = "uid-p2-again"
	if err := e.kube.Tracker().Create(gvr, again, "ai"); err != nil {
		t.Fatal(err)
	}
	if err := e.books.SetPod(recordOf(again)); err != nil {
		t.Fatal(err)
	}
	e.allocated(t, "p1") // p2's bind goes on, with its copy of the old pod
	if msg := <-done; !strings.Contains(msg, "was recreated") {
		t.Fatalf("bind of the recreated pod: %q", msg)
	}
	if got := e.books.Pods(); len(got) != 1 || got[0] != "ai/p1@n1" || e.usedMiB() != 4000 {
		t.Fatalf("books %v, %d MiB; want p1 alone", got, e.usedMiB())
	}
}

// A bind of a pod that another bind of it is still booking (kube-scheduler
// retried the pod while the first bind was under way) books and binds
// nothing: the first one may still land.
func TestSecondBindOfAPodUnderWayIsRefused(t *testing.T) {
	p := bindPod("p1", "4000")
	e := newBindEnv(t, 10, time.Second, p)
	a := protocol.Assignment{Node: "n1", Containers: []protocol.ContainerAssignment{{Name: "main", GPUs: []protocol.GPUSlice{{UUID: "GPU-0", MemoryMiB: 4000}}}}}
	raw, _ := protocol.EncodeAssignment(a)
	if _, ok := e.books.Book(recordOf(p), a, raw, 0); !ok { // the first bind's booking
		t.Fatal("first booking refused")
	}
	if msg := e.bind("p1"); !strings.Contains(msg, "another bind of it is still under way") {
		t.Fatalf("second bind: %q", msg)
	}
	if len(e.bindings) != 0 || e.usedMiB() != 4000 {
		t.Fatalf("the second bind bound (%d Bindings) or moved the first one's booking (%d MiB)", len(e.bindings), e.usedMiB())
	}
}

// unanswerBinding makes p1's Bindings fail with a deadline, unwritten,
// and may land for hold; land, if set, is called with each one.
func (e *bindEnv) unanswerBinding(hold time.Duration, land func(b *corev1.Binding)) {
	e.binder.cfg.UnansweredHold = hold
	e.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		b, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		if a.GetSubresource() != "binding" || !ok || b.Name != "p1" {
			return false, nil, nil
		}
		if land != nil {
			land(b.DeepCopy())
		}
		return true, nil, context.DeadlineExceeded
	})
}

// waitForTimers blocks until the fake clock has n timers waiting: the
// goroutine the test awaits has reached its wait.
func (e *bindEnv) waitForTimers(t *testing.T, n int) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { return e.fake.Waiters() >= n, nil }); err != nil {
		t.Fatalf("%d timers waiting, want %d", e.fake.Waiters(), n)
	}
}

// A Binding that got no answer may still land: until it no longer can,
// the pod's room stays booked and the node stays in flight, and a retry
// of the pod is refused; then, not bound, it is all given back.
func TestUnansweredBindingHoldsItsRoomUntilItCanTell(t *testing.T) {
	const hold, bindWait = time.Second, 50 * time.Millisecond
	e := newFakeClockBindEnv(t, 10, bindWait, bindPod("p1", "4000"), bindPod("p2", "4000"))
	e.unanswerBinding(hold, nil)
	if msg := e.bind("p1"); !strings.Contains(msg, "the Binding got no answer and may still land: context deadline exceeded") {
		t.Fatalf("bind: %q", msg)
	}
	if used, busy := e.usedMiB(), e.books.InFlight("n1", ""); used != 4000 || busy != "ai/p1" {
		t.Fatalf("right after: usage %d MiB, in flight %q; want 4000 and ai/p1", used, busy)
	}
	e.waitForTimers(t, 1) // settle's hold
	other := make(chan string, 1)
	go func() { other <- e.bind("p2") }()
	e.waitForTimers(t, 3) // p2's bind waits for the node: its deadline and its look again
	e.fake.Step(bindWait)
	if msg := <-other; !strings.Contains(msg, "pod ai/p1 is bound but kubelet has not allocated") {
		t.Fatalf("another pod's bind to the node meanwhile: %q", msg)
	}
	if msg := e.bind("p1"); !strings.Contains(msg, "another bind of it is still under way") {
		t.Fatalf("a retry of the pod meanwhile: %q", msg)
	}
	e.fake.Step(hold - bindWait - time.Nanosecond)
	// A fake timer fires, and leaves the waiters, in Step itself.
	if e.fake.Waiters() != 1 {
		t.Fatal("settle's hold ended early")
	}
	if used, busy := e.usedMiB(), e.books.InFlight("n1", ""); used != 4000 || busy != "ai/p1" {
		t.Fatalf("given back before the hold ended: usage %d MiB, in flight %q", used, busy)
	}
	e.fake.Step(time.Nanosecond)
	e.binder.Wait()
	if used, busy := e.usedMiB(), e.books.InFlight("n1", ""); used != 0 || busy != "" {
		t.Fatalf("not given back when the hold ended: usage %d MiB, in flight %q", used, busy)
	}
	if msg := e.bind("p2"); msg != "" {
		t.Fatalf("bind after: %q", msg)
	}
}

// An unanswered Binding that lands later keeps its booking, even when
// the informer has not shown it yet: the pod runs with those GPUs.
func TestUnansweredBindingThatLandsIsKept(t *testing.T) {
	const hold = time.Second
	e := newFakeClockBindEnv(t, 10, 50*time.Millisecond, bindPod("p1", "4000"))
	var sent *corev1.Binding
	e.unanswerBinding(hold, func(b *corev1.Binding) { sent = b })
	if msg := e.bind("p1"); !strings.Contains(msg, "may still land") {
		t.Fatalf("bind: %q", msg)
	}
	e.land(t, sent) // after its answer was lost; no informer hears of it
	e.waitForTimers(t, 1)
	e.fake.Step(hold - time.Nanosecond)
	if e.fake.Waiters() != 1 {
		t.Fatal("settle's hold ended early")
	}
	e.fake.Step(time.Nanosecond)
	e.binder.Wait()
	if used := e.usedMiB(); used != 4000 {
		t.Fatalf("a Binding that landed lost its booking: usage %d MiB", used)
	}
}

// land writes b as the apiserver would, and tells no informer.
func (e *bindEnv) land(t *testing.T, b *corev1.Binding) {
	t.Helper()
	obj, err := e.kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "ai", b.Name)
	if err != nil {
		t.Fatal(err)
	}
	p := obj.(*corev1.Pod).DeepCopy()
	p.Spec.NodeName = b.Target.Name
	p.Annotations = b.Annotations
	if err := e.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, "ai"); err != nil {
		t.Fatal(err)
	}
}

// When the hold ends and the pod cannot be read, nothing is known: the
// booking stays, and settle reads again, backing off, until the apiserver
// answers.
func TestSettleReadsAgainUntilTheAPIServerAnswers(t *testing.T) {
	const hold = 500 * time.Millisecond
	e := newFakeClockBindEnv(t, 10, 50*time.Millisecond, bindPod("p1", "4000"))
	var down atomic.Bool
	reads := make(chan struct{}, 10)
	e.kube.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		reads <- struct{}{}
		if down.Load() {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		return false, nil, nil
	})
	var sent *corev1.Binding
	e.unanswerBinding(hold, func(b *corev1.Binding) { sent = b; down.Store(true) })
	if msg := e.bind("p1"); !strings.Contains(msg, "may still land") {
		t.Fatalf("bind: %q", msg)
	}
	for len(reads) > 0 { // boundAnyway's read, refused
		<-reads
	}
	e.land(t, sent)
	e.waitForTimers(t, 1)
	e.fake.Step(hold)
	<-reads               // the first read, which fails
	e.waitForTimers(t, 1) // and the next wait, twice as long
	if used := e.usedMiB(); used != 4000 {
		t.Fatalf("given back on a failed read: usage %d MiB", used)
	}
	down.Store(false)
	e.fake.Step(2*hold - time.Nanosecond)
	if e.fake.Waiters() != 1 {
		t.Fatal("read again before the backoff ended")
	}
	e.fake.Step(time.Nanosecond)
	e.binder.Wait()
	if len(reads) != 1 {
		t.Fatalf("%d reads after the backoff, want 1", len(reads))
	}
	if used := e.usedMiB(); used != 4000 {
		t.Fatalf("a Binding that landed lost its booking: usage %d MiB", used)
	}
}

// settle ends with the term, holding what it held: the next term's books
// are built afresh from the API.
func TestSettleEndsWithTheTerm(t *testing.T) {
	e := newFakeClockBindEnv(t, 10, 50*time.Millisecond, bindPod("p1", "4000"))
	e.unanswerBinding(time.Second, nil)
	if msg := e.bind("p1"); !strings.Contains(msg, "may still land") {
		t.Fatalf("bind: %q", msg)
	}
	e.waitForTimers(t, 1)
	e.endTerm()
	e.binder.Wait()
	if e.fake.HasWaiters() {
		t.Fatal("settle left its timer behind")
	}
}

// A bind that ends once Wait has begun starts no settle, so Wait never
// races a new one, nor is held up by one.
func TestNoSettleStartsOnceWaitBegan(t *testing.T) {
	e := newFakeClockBindEnv(t, 10, 50*time.Millisecond, bindPod("p1", "4000"))
	e.unanswerBinding(time.Second, nil)
	e.binder.Wait()
	if msg := e.bind("p1"); !strings.Contains(msg, "may still land") {
		t.Fatalf("bind: %q", msg)
	}
	done := make(chan struct{})
	go func() { e.binder.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("Wait waits for a settle started after it began")
	}
}

func TestUnansweredIsWhatTheAPIServerDidNotRefuse(t *testing.T) {
	gr := corev1.Resource("pods")
	for _, c := range []struct {
		err  error
		want bool
	}{
		{apierrors.NewConflict(gr, "p1", errors.New("modified")), false},
		{apierrors.NewNotFound(gr, "p1"), false},
		{apierrors.NewBadRequest("bad"), false},
		{apierrors.NewForbidden(gr, "p1", errors.New("no")), false},
		{apierrors.NewTooManyRequests("busy", 1), false},
		{apierrors.NewTimeoutError("slow", 1), true},
		{apierrors.NewServerTimeout(gr, "create", 1), true},
		{apierrors.NewInternalError(errors.New("etcd")), true},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("post: %w", errors.New("connection reset by peer")), true},
	} {
		if got := unanswered(c.err); got != c.want {
			t.Errorf("unanswered(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// Where the runtime names pods (NRI), binds to one node go one after
// another with no wait, and the Binding writes no phase.
func TestBindNeedsNoOrderWhereTheRuntimeNamesPods(t *testing.T) {
	e := newBindEnv(t, 10, time.Hour, bindPod("p1", "4000"), bindPod("p2", "3000"))
	inv, _ := protocol.EncodeInventory(protocol.Inventory{GPUs: []protocol.GPU{{UUID: "GPU-0", Model: "A100", MemoryMiB: 16000, Cores: 100, Split: 10, Healthy: true}}})
	e.books.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{
		wellknown.AnnotationGPUs: inv, wellknown.AnnotationPlugin: wellknown.PluginServing, wellknown.AnnotationIdentity: wellknown.IdentityRuntime}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("10")}}})
	for _, name := range []string{"p1", "p2"} {
		if msg := e.bind(name); msg != "" {
			t.Fatalf("%s: %s", name, msg)
		}
		p, _ := e.kube.CoreV1().Pods("ai").Get(context.Background(), name, metav1.GetOptions{})
		if _, ok := p.Annotations[wellknown.AnnotationPhase]; ok || p.Annotations[wellknown.AnnotationAssignment] == "" {
			t.Fatalf("%s annotations %v: want an assignment and no phase", name, p.Annotations)
		}
	}
	if e.usedMiB() != 7000 {
		t.Fatalf("usage %d", e.usedMiB())
	}
}

// usedMiB is a namespace's charged memory, -1 where it is unknown.
func usedMiB(u podmodel.Usage, err error) int64 {
	if err != nil {
		return -1
	}
	return u.MemMiB
}

// Every bind is counted with why: a tenant's quota refusal, or a pod that
// changed under the bind, is a refusal, never a failure of vgpud's
// (which VgpudBindsFailing alerts on).
func TestBindCountsEachOutcomeWithItsReason(t *testing.T) {
	other := bindPod("other-profile", "1")
	other.Spec.SchedulerName = "default-scheduler"
	e := newBindEnv(t, 10, time.Second, bindPod("p1", "4000"), bindPod("big", "2000"), bindPod("conflicted", "1"), bindPod("bad", "1"), bindPod("fenced", "1"),
		bindPod("forbidden", "1"), other)
	e.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		b, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		switch {
		case a.GetSubresource() != "binding" || !ok:
			return false, nil, nil
		case b.Name == "conflicted":
			return true, nil, apierrors.NewConflict(corev1.Resource("pods"), b.Name, errors.New("the object has been modified"))
		case b.Name == "bad":
			return true, nil, apierrors.NewBadRequest("node n1 is gone")
		case b.Name == "forbidden":
			return true, nil, apierrors.NewForbidden(corev1.Resource("pods/binding"), b.Name, errors.New("ValidatingAdmissionPolicy 'vgpud-own-writes' denied request: only the replica that holds the Lease binds"))
		}
		return false, nil, nil
	})
	for _, tc := range []struct{ pod, want string }{
		{"p1", "bound/bound"},
		{"gone", "refused/pod_changed"},
		{"conflicted", "refused/pod_changed"},
		{"bad", "failed/api_error"},
		{"forbidden", "failed/not_leader"},
		{"other-profile", "failed/misconfigured"},
	} {
		if tc.pod == "p1" {
			e.bind(tc.pod)
			<-e.bindings
			e.allocated(t, "p1")
		} else if msg := e.bind(tc.pod); msg == "" {
			t.Fatalf("%s bound; want %s", tc.pod, tc.want)
		}
		if got := <-e.observed; got != tc.want {
			t.Errorf("bind of %s counted as %s, want %s", tc.pod, got, tc.want)
		}
	}
	e.limits["ai"] = podmodel.Quota{Memory: podmodel.Limit{Set: true, Hard: 5000}}
	if msg := e.bind("big"); msg == "" {
		t.Fatal("bound past the quota")
	}
	if got := <-e.observed; got != "refused/quota" {
		t.Errorf("bind past the quota counted as %s, want refused/quota", got)
	}
	e.limits["ai"] = podmodel.Quota{}
	e.fences.Store(0)
	if msg := e.bind("fenced"); msg == "" {
		t.Fatal("bound without the Lease")
	}
	if got := <-e.observed; got != "failed/not_leader" {
		t.Errorf("bind without the Lease counted as %s, want failed/not_leader", got)
	}
}

// A claim's admission waits on the namespace's quota lock only as long
// as the apiserver waits for it: while a bind holds the lock past that,
// it gives up (and the webhook refuses the claim), and the lock, once
// the bind lets it go, is free again.
func TestLockQuotaWithinGivesUpInTime(t *testing.T) {
	e := newBindEnv(t, 10, time.Second)
	e.limits["ai"] = podmodel.Quota{Memory: podmodel.Limit{Set: true, Hard: 10000}}
	unbind := e.binder.LockQuota("ai") // a bind holds it
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if unlock, err := e.binder.LockQuotaWithin(ctx, "ai"); err == nil {
		unlock()
		t.Fatal("took the lock a bind holds")
	}
	unbind()
	free, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	unlock, err := e.binder.LockQuotaWithin(free, "ai")
	if err != nil {
		t.Fatalf("once the bind let it go: %v", err)
	}
	unlock()
	// A namespace without a vGPU quota takes no lock.
	unlock, err = e.binder.LockQuotaWithin(ctx, "open")
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}
