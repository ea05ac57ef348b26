package preemptor

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/vgpud/vgpud/cluster/internal/extender"
	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
)

// chooser answers Choose with choice for every pod, recording names'
// verdict on each node and the nominations.
type chooser struct {
	mu        sync.Mutex
	choice    extender.Choice
	admitted  map[string]bool
	nominated map[types.UID]string
}

func (c *chooser) Choose(_ context.Context, _ *slimpod.Pod, nodes extender.NodeLister, names func(string) bool) (extender.Choice, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.admitted = map[string]bool{}
	for _, n := range nodes.NodeNames() {
		c.admitted[n] = names(n)
	}
	return c.choice, len(c.choice.Victims) > 0, nil
}

func (c *chooser) Nominate(node string, pod *slimpod.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nominated[pod.UID] = node
}

func (c *chooser) Unnominate(pod types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nominated, pod)
}

type names []string

func (n names) NodeNames() []string { return n }

func pod(name string, prio int32) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{Priority: &prio}}
}

func TestPreemptorEvictsOnceKubeSchedulerHadItsTurn(t *testing.T) {
	high := pod("high", 1000)
	high.Spec.NodeSelector = map[string]string{"pool": "a"}
	cs := fake.NewClientset(high, pod("low-1", 0), pod("low-2", 0))
	var evicted []string
	var mu sync.Mutex
	blocked := "low-2" // its disruption budget refuses, at first
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		if ev.Name == blocked {
			return true, nil, apierrors.NewTooManyRequests("budget", 1)
		}
		if len(ev.DeleteOptions.DryRun) == 0 {
			evicted = append(evicted, ev.Name)
		}
		return true, nil, nil
	})
	nodes := map[string]*corev1.Node{
		"a1": {ObjectMeta: metav1.ObjectMeta{Name: "a1", Labels: map[string]string{"pool": "a"}}},
		"b1": {ObjectMeta: metav1.ObjectMeta{Name: "b1", Labels: map[string]string{"pool": "b"}}},
		"a2": {ObjectMeta: metav1.ObjectMeta{Name: "a2", Labels: map[string]string{"pool": "a"}}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}}},
	}
	slim := map[string]*slimpod.Pod{}
	for _, p := range []*corev1.Pod{high, pod("low-1", 0), pod("low-2", 0)} {
		slim[p.Name] = &slimpod.Pod{Meta: slimpod.Meta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion, DeletionTimestamp: p.DeletionTimestamp, Annotations: p.Annotations}, Priority: *p.Spec.Priority}
	}
	c := &chooser{nominated: map[types.UID]string{}, choice: extender.Choice{Node: "a1", Victims: []fit.Resident{
		{Key: "uid-low-1", Namespace: "t", Name: "low-1"}, {Key: "uid-low-2", Namespace: "t", Name: "low-2"}}}}
	clk := testingclock.NewFakeClock(time.Now())
	var events []string
	p := New(Deps{Choose: c, Books: names{"a1", "a2", "b1"}, Node: func(n string) *corev1.Node { return nodes[n] },
		Lookup: func(_, name string) *slimpod.Pod { return slim[name] }, API: cs.CoreV1(), Fence: func() error { return nil },
		Events: func(p *corev1.Pod, reason, _ string) { events = append(events, p.Name+":"+reason) }, Clock: clk, Log: slog.New(slog.DiscardHandler)})
	ctx := context.Background()

	// kube-scheduler asked to preempt for one pod: it is its to do.
	asked := &slimpod.Pod{Meta: slimpod.Meta{Namespace: "t", Name: "asked", UID: "uid-asked"}, Priority: 1000}
	slim["asked"] = asked
	p.Refused(asked)
	p.Asked(asked.UID)
	p.Refused(slim["high"])
	p.round(ctx)
	if len(evicted) != 0 {
		t.Fatalf("evicted %v before kube-scheduler had its turn", evicted)
	}
	clk.Step(settle)
	p.round(ctx)
	if len(evicted) != 0 || !slices.Contains(events, "high:PreemptionBlocked") {
		t.Fatalf("evicted %v (events %v) while a victim's budget refuses; want none", evicted, events)
	}
	mu.Lock()
	blocked = ""
	mu.Unlock()
	clk.Step(retry)
	p.round(ctx)
	if !slices.Equal(evicted, []string{"low-1", "low-2"}) {
		t.Fatalf("evicted %v; want low-1 and low-2 for high alone", evicted)
	}
	if !c.admitted["a1"] || c.admitted["b1"] || c.admitted["a2"] {
		t.Errorf("nodes weighed %v; want a1 only (b1 fails the selector, a2 a taint)", c.admitted)
	}
	if c.nominated["uid-high"] != "a1" || !slices.Contains(events, "high:Preempting") || !slices.Contains(events, "low-1:Preempted") {
		t.Errorf("nominated %v, events %v", c.nominated, events)
	}
	// Refused again while its victims go: nothing more is evicted; bound,
	// its node is let go.
	p.Refused(slim["high"])
	clk.Step(settle)
	p.round(ctx)
	if len(evicted) != 2 {
		t.Errorf("evicted again while the victims go: %v", evicted)
	}
	slim["high"].NodeName = "a1"
	p.round(ctx)
	if _, ok := c.nominated["uid-high"]; ok {
		t.Error("the node is still held once the pod bound")
	}
}
