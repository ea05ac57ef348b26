package books

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// record is what the leader's informer stores for p (Transform).
func record(p *corev1.Pod) *slimpod.Pod { return slimpod.Of(p, wellknown.DefaultResourceNames()) }

// gpuNode's GPUs have 40 slots of 1000 MiB, so a 1000 MiB slice is
// charged what it names (podmodel.SlotShare).
func gpuNode(name string, gpus int, allocatable string) *corev1.Node {
	inv := protocol.Inventory{}
	for i := 0; i < gpus; i++ {
		inv.GPUs = append(inv.GPUs, protocol.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: "A100", MemoryMiB: 40000, Cores: 100, Split: 40, Healthy: true})
	}
	raw, err := protocol.EncodeInventory(inv)
	if err != nil {
		panic(err)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{wellknown.AnnotationGPUs: raw, wellknown.AnnotationPlugin: wellknown.PluginServing}},
		Status:     corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(allocatable)}},
	}
}

func assigned(name, node string, initMem int64, appMem ...int64) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{SchedulerName: "vgpud-scheduler"}}
	a := protocol.Assignment{Node: node}
	gpu := "GPU-" + node + "-0"
	if initMem > 0 {
		p.Spec.InitContainers = []corev1.Container{{Name: "init"}}
		a.Containers = append(a.Containers, protocol.ContainerAssignment{Name: "init", GPUs: []protocol.GPUSlice{{UUID: gpu, MemoryMiB: initMem}}})
	}
	for i, m := range appMem {
		n := fmt.Sprintf("c%d", i)
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: n})
		a.Containers = append(a.Containers, protocol.ContainerAssignment{Name: n, GPUs: []protocol.GPUSlice{{UUID: gpu, MemoryMiB: m, Cores: 10}}})
	}
	raw, err := protocol.EncodeAssignment(a)
	if err != nil {
		panic(err)
	}
	p.Annotations = map[string]string{wellknown.AnnotationAssignment: raw}
	return p
}

func TestUsageFromAnnotations(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 2, "20"))
	for _, p := range []*corev1.Pod{assigned("a", "n1", 0, 1000, 2000), assigned("b", "n1", 30000, 5000)} {
		if err := c.SetPod(record(p)); err != nil {
			t.Fatal(err)
		}
	}
	n, r := c.Node("n1")
	if r != nil {
		t.Fatal(r)
	}
	// a: 3000 summed over its two app containers; b: peak of init 30000 and app 5000.
	want := podmodel.Usage{MemMiB: 33000, Cores: 30, Slots: 3}
	if n.GPUs[0].Used != want {
		t.Fatalf("GPU 0 usage %+v, want %+v", n.GPUs[0].Used, want)
	}
	done := assigned("b", "n1", 30000, 5000)
	done.Status.Phase = corev1.PodSucceeded
	_ = c.SetPod(record(done))
	n, _ = c.Node("n1")
	if n.GPUs[0].Used != (podmodel.Usage{MemMiB: 3000, Cores: 20, Slots: 2}) {
		t.Fatalf("a terminated pod still holds GPUs: %+v", n.GPUs[0].Used)
	}
	c.DeletePod("uid-a")
	n, _ = c.Node("n1")
	if n.GPUs[0].Used != (podmodel.Usage{}) {
		t.Fatalf("usage leaked: %+v", n.GPUs[0].Used)
	}
}

// A sidecar (init container with restartPolicy Always) holds its slice for
// the pod's life, on top of the app containers; a plain init container of
// the same size would count only at its peak.
func TestSidecarIsBookedForLife(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 1, "10"))
	p := assigned("s", "n1", 4000, 5000)
	always := corev1.ContainerRestartPolicyAlways
	p.Spec.InitContainers[0].RestartPolicy = &always
	if err := c.SetPod(record(p)); err != nil {
		t.Fatal(err)
	}
	n, _ := c.Node("n1")
	if want := (podmodel.Usage{MemMiB: 9000, Cores: 10, Slots: 2}); n.GPUs[0].Used != want {
		t.Fatalf("sidecar pod books %+v, want %+v", n.GPUs[0].Used, want)
	}
}

// Only what vgpud's bind could have written is booked: a forged
// assignment on another scheduler's pod, or one naming a node the pod is
// not bound to, books nothing and says why.
func TestForgedAssignmentsAreNotBooked(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 1, "10"))
	other := assigned("squat", "n1", 0, 40000)
	other.Spec.SchedulerName = "nobody"
	if err := c.SetPod(record(other)); err == nil || !strings.Contains(err.Error(), `schedulerName "nobody"`) {
		t.Errorf("another scheduler's pod: %v", err)
	}
	elsewhere := assigned("steal", "n1", 0, 40000)
	elsewhere.Spec.NodeName = "n2"
	if err := c.SetPod(record(elsewhere)); err == nil || !strings.Contains(err.Error(), "bound to n2") {
		t.Errorf("pod bound elsewhere: %v", err)
	}
	huge := assigned("huge", "n1", 0, 40001)
	if err := c.SetPod(record(huge)); err == nil || !strings.Contains(err.Error(), `assignment not booked on node n1: container "c0" asks 40001 MiB of GPU GPU-n1-0, which has 40000 MiB`) {
		t.Errorf("slice larger than the GPU: %v", err)
	}
	stranger := assigned("stranger", "n1", 0, 1000)
	stranger.Annotations[wellknown.AnnotationAssignment] = strings.ReplaceAll(stranger.Annotations[wellknown.AnnotationAssignment], "GPU-n1-0", "GPU-n9-0")
	if err := c.SetPod(record(stranger)); err == nil || !strings.Contains(err.Error(), `assignment not booked on node n1: container "c0" names GPU GPU-n9-0, which the node does not have`) {
		t.Errorf("GPU of another node: %v", err)
	}
	n, _ := c.Node("n1")
	if n.GPUs[0].Used != (podmodel.Usage{}) || len(c.Pods()) != 0 {
		t.Fatalf("forged assignments booked: %+v %v", n.GPUs[0].Used, c.Pods())
	}
	// Ours, bound or not yet bound, is.
	ok := assigned("ok", "n1", 0, 1000)
	ok.Spec.NodeName = "n1"
	if err := c.SetPod(record(ok)); err != nil || len(c.Pods()) != 1 {
		t.Fatalf("vgpud's own pod: %v %v", err, c.Pods())
	}
}

func TestNodeUsability(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("down", 1, "0"))
	bad := gpuNode("bad", 1, "10")
	bad.Annotations[wellknown.AnnotationGPUs] = "0,GPU-1,10,40960,100,A100,true:"
	c.SetNode(bad)
	draining := gpuNode("draining", 1, "10")
	draining.Annotations[wellknown.AnnotationPlugin] = wellknown.PluginDraining
	c.SetNode(draining)
	for name, kind := range map[string]string{"down": "device plugin not registered", "bad": "bad vgpud inventory", "absent": "no vgpud inventory", "draining": "device plugin not serving"} {
		if _, r := c.Node(name); r == nil || r.Kind != kind {
			t.Errorf("%s: reason %+v, want %q", name, r, kind)
		}
	}
	p := assigned("x", "n1", 0, 1000)
	p.Annotations[wellknown.AnnotationAssignment] = "{broken"
	if err := c.SetPod(record(p)); err == nil {
		t.Error("an unreadable assignment must be reported")
	}
}

// TestRebuildEqualsPrevious: a leader that starts over (restart, failover)
// reads the same objects in another order and must hold the same books.
func TestRebuildEqualsPrevious(t *testing.T) {
	nodes := []*corev1.Node{gpuNode("n1", 2, "20"), gpuNode("n2", 2, "20")}
	pods := []*corev1.Pod{assigned("a", "n1", 0, 1000), assigned("b", "n2", 8000, 3000, 4000), assigned("c", "n1", 0, 500)}
	first := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	for _, p := range pods { // pods before their nodes, as informers may deliver
		_ = first.SetPod(record(p))
	}
	for _, n := range nodes {
		first.SetNode(n)
	}

	kube := fake.NewClientset()
	for _, n := range nodes {
		_, _ = kube.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	}
	for _, p := range pods {
		_, _ = kube.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	}
	rebuilt := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTransform(Transform(wellknown.DefaultResourceNames())))
	synced, err := rebuilt.Watch(factory.Core().V1().Pods().Informer(), factory.Core().V1().Nodes().Informer(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		t.Fatal("cache never synced")
	}
	if !reflect.DeepEqual(first.Stats(), rebuilt.Stats()) {
		t.Fatalf("rebuilt usage differs:\n first %v\n again %v", first.Stats(), rebuilt.Stats())
	}
	if !reflect.DeepEqual(first.Pods(), rebuilt.Pods()) {
		t.Fatalf("rebuilt pods differ: %v vs %v", first.Pods(), rebuilt.Pods())
	}
}

func TestTransformKeepsWhatTheLeaderReads(t *testing.T) {
	p := assigned("a", "n1", 8000, 1000)
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	p.Labels = map[string]string{"app": "train"}
	p.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = strings.Repeat("x", 4096)
	p.Annotations[wellknown.AnnotationUseGPUType] = "A100"
	p.Annotations[wellknown.AnnotationNodePolicyHAMi] = "spread"
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "BIG", Value: "x"}}
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}}
	p.Spec.NodeName = "n1"
	out, err := Transform(wellknown.DefaultResourceNames())(p)
	if err != nil {
		t.Fatal(err)
	}
	r := out.(*slimpod.Pod)
	if r.GetManagedFields() != nil || r.GetLabels() != nil || len(r.Annotations) != 2 || !r.HasAssignment || r.AssignmentPhase != p.Annotations[wellknown.AnnotationPhase] {
		t.Errorf("not trimmed: %+v", r)
	}
	want := []podmodel.ContainerRequest{{Name: "init", Kind: podmodel.KindInit}, {Name: "c0", GPUs: 1, HasGPUs: true}}
	if r.Assignment != p.Annotations[wellknown.AnnotationAssignment] || r.Annotations[wellknown.AnnotationUseGPUType] != "A100" || r.Annotations[wellknown.AnnotationNodePolicyHAMi] != "spread" ||
		r.Phase != corev1.PodRunning || r.NodeName != "n1" || r.SchedulerName != "vgpud-scheduler" || r.UID != p.UID || !r.Wants || r.Invalid != nil || !reflect.DeepEqual(r.Containers, want) {
		t.Errorf("trimmed too much: %+v", r)
	}
	// A record passes through again unchanged (informers may transform
	// twice), and nodes keep only what SetNode reads.
	if again, _ := Transform(wellknown.DefaultResourceNames())(r); again != r {
		t.Errorf("a record was transformed again")
	}
	n := gpuNode("n1", 1, "10")
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady}}
	out, _ = Transform(wellknown.DefaultResourceNames())(n)
	tn := out.(*corev1.Node)
	if tn.ManagedFields != nil || tn.Status.Conditions != nil || tn.Annotations[wellknown.AnnotationGPUs] == "" || !tn.Status.Allocatable["nvidia.com/gpu"].Equal(resource.MustParse("10")) {
		t.Errorf("node trimmed wrong: %+v", tn)
	}
}

// A booking without a node does not hold the node's one in-flight slot;
// once the pod has a node, an older event without it does not undo that.
func TestUnboundBookingsAreNotInFlight(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 1, "10"))
	ghost := assigned("ghost", "n1", 0, 1000)
	ghost.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseBound)
	ghost.Status.Phase = corev1.PodPending
	if err := c.SetPod(record(ghost)); err != nil {
		t.Fatal(err)
	}
	if busy := c.InFlight("n1", ""); busy != "" {
		t.Fatalf("a booking without a node blocks binds: %s", busy)
	}
	c.MarkBound(ghost.UID, "n1") // its Binding succeeded
	_ = c.SetPod(record(ghost))  // the informer's older event, without the node
	if busy := c.InFlight("n1", ""); busy != "ns/ghost" {
		t.Fatalf("bound pod not in flight: %q", busy)
	}
}

// A bound booking that holds no GPU (an init container that never ends,
// an app container asking none) is no Allocate kubelet will make: it must
// not hold the node's in-flight slot, alive or deleted.
func TestBookingWithoutGPUsIsNotInFlight(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clocktesting.NewFakePassiveClock(time.Now()))
	c.KeepDeletedInFlight(time.Minute)
	c.SetNode(gpuNode("n1", 1, "10"))
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: "ns", UID: "uid-empty", Annotations: map[string]string{}},
		Spec: corev1.PodSpec{SchedulerName: "vgpud-scheduler", NodeName: "n1",
			InitContainers: []corev1.Container{{Name: "wait"}}, Containers: []corev1.Container{{Name: "main"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	raw, err := protocol.EncodeAssignment(protocol.Assignment{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[wellknown.AnnotationAssignment] = raw
	p.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseBound)
	if err := c.SetPod(record(p)); err != nil {
		t.Fatal(err)
	}
	if busy := c.InFlight("n1", ""); busy != "" {
		t.Fatalf("a booking without GPUs blocks binds on its node: %s", busy)
	}
	c.DeletePod(p.UID)
	if busy := c.InFlight("n1", ""); busy != "" {
		t.Fatalf("a deleted booking without GPUs blocks binds on its node: %s", busy)
	}
}

// A pod deleted while in flight holds the node's in-flight slot a while
// longer: kubelet may still be admitting it, and a second bound pod then
// would be served its Allocate.
func TestDeletedInFlightPodHoldsTheSlot(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clk)
	c.KeepDeletedInFlight(20 * time.Second)
	c.SetNode(gpuNode("n1", 1, "10"))
	p := assigned("first", "n1", 0, 1000)
	p.Spec.NodeName = "n1"
	p.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseBound)
	p.Status.Phase = corev1.PodPending
	if err := c.SetPod(record(p)); err != nil {
		t.Fatal(err)
	}
	c.DeletePod(p.UID)
	if busy := c.InFlight("n1", ""); busy != "ns/first (deleted)" {
		t.Fatalf("in flight %q right after the delete", busy)
	}
	clk.SetTime(clk.Now().Add(20*time.Second - time.Nanosecond))
	if busy := c.InFlight("n1", ""); busy != "ns/first (deleted)" {
		t.Fatalf("in flight %q just before the grace ends", busy)
	}
	clk.SetTime(clk.Now().Add(time.Nanosecond))
	if busy := c.InFlight("n1", ""); busy != "" {
		t.Fatalf("in flight %q after the grace", busy)
	}
	// A pod that terminated (kubelet is done with it) holds nothing.
	q := assigned("second", "n1", 0, 1000)
	q.Spec.NodeName = "n1"
	q.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseBound)
	q.Status.Phase = corev1.PodPending
	_ = c.SetPod(record(q))
	q.Status.Phase = corev1.PodFailed
	_ = c.SetPod(record(q))
	if busy := c.InFlight("n1", ""); busy != "" {
		t.Fatalf("a terminated pod holds the slot: %q", busy)
	}
}

// The bind marks a pod bound after its Binding; if the informer already
// said the pod was allocated, the pod must not go back to in flight (the
// node would be blocked for good).
func TestMarkBoundAfterAllocatedKeepsTheNodeFree(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 1, "10"))
	p := assigned("fast", "n1", 0, 1000)
	p.Spec.NodeName = "n1"
	p.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseAllocated)
	p.Status.Phase = corev1.PodPending
	if err := c.SetPod(record(p)); err != nil {
		t.Fatal(err)
	}
	c.MarkBound(p.UID, "n1")
	if busy := c.InFlight("n1", ""); busy != "" {
		t.Fatalf("an allocated pod is in flight again: %q", busy)
	}
}

// NodeFor shares the books' node instead of copying it: what a caller
// holds must not change when the books do.
func TestNodeForIsASnapshot(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 2, "20"))
	before, reason := c.NodeFor("n1", "")
	if reason != nil {
		t.Fatal(reason.Text)
	}
	if err := c.SetPod(record(assigned("p", "n1", 0, 3000))); err != nil {
		t.Fatal(err)
	}
	after, _ := c.NodeFor("n1", "")
	if before.GPUs[0].Used.MemMiB != 0 || after.GPUs[0].Used.MemMiB != 3000 {
		t.Errorf("GPU 0 used before the booking %d MiB (want 0), after %d (want 3000)", before.GPUs[0].Used.MemMiB, after.GPUs[0].Used.MemMiB)
	}
	if allocs := testing.AllocsPerRun(100, func() { _, _ = c.NodeFor("n1", "") }); allocs != 0 {
		t.Errorf("NodeFor allocates %.0f times per call", allocs)
	}
}

// EachNodeFor answers for each name what NodeFor does, the pod's own
// node without its booking, and stops where told.
func TestEachNodeForIsNodeForOfEach(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 1, "10"))
	c.SetNode(gpuNode("n2", 1, "10"))
	own := assigned("own", "n2", 0, 3000)
	other := assigned("other", "n2", 0, 1000)
	for _, p := range []*corev1.Pod{own, other} {
		if err := c.SetPod(record(p)); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"n1", "gone", "n2"}
	for range eachNodeRun { // past one run under the lock
		names = append(names, "n2")
	}
	for _, pod := range []types.UID{"", own.UID, "unknown"} {
		var seen []int
		c.EachNodeFor(names, pod, func(i int, n fit.Node, fullness int64, reason *fit.Reason) bool {
			seen = append(seen, i)
			want, wantReason := c.NodeFor(names[i], pod)
			if !reflect.DeepEqual(n, want) || !reflect.DeepEqual(reason, wantReason) {
				t.Errorf("pod %q, node %s: EachNodeFor %+v %v, NodeFor %+v %v", pod, names[i], n, reason, want, wantReason)
			}
			if wantFull := fit.Fullness(want); reason == nil && fullness != wantFull {
				t.Errorf("pod %q, node %s: fullness %d, want %d", pod, names[i], fullness, wantFull)
			}
			return true
		})
		if len(seen) != len(names) || !slices.IsSorted(seen) || seen[0] != 0 {
			t.Errorf("pod %q: saw %d of %d names, in order %v", pod, len(seen), len(names), slices.IsSorted(seen))
		}
	}
	if n, _ := c.NodeFor("n2", own.UID); n.GPUs[0].Used.MemMiB != 1000 {
		t.Errorf("n2 as its own pod sees it holds %d MiB, want 1000 (the other pod's)", n.GPUs[0].Used.MemMiB)
	}
	calls := 0
	c.EachNodeFor(names, "", func(int, fit.Node, int64, *fit.Reason) bool { calls++; return false })
	if calls != 1 {
		t.Errorf("told to stop at once, EachNodeFor called %d times", calls)
	}
}

// A bind books the pod itself, then the informer echoes each write back:
// echoes that change nothing are skipped, and every one that does change
// the booking (the node set, the pod allocated, a new assignment) still
// lands.
func TestEchoesOfABind(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 1, "10"))
	c.SetNode(gpuNode("n2", 1, "10"))
	p := assigned("p", "n1", 0, 1000)
	p.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseBound)
	p.Status.Phase = corev1.PodPending
	mustBook(t, c, p, 0)
	if err := c.SetPod(record(p)); err != nil { // the assignment's echo
		t.Fatal(err)
	}
	if busy := c.InFlight("n1", ""); busy != "" {
		t.Fatalf("in flight %q before the Binding", busy)
	}
	p.Spec.NodeName = "n1" // the Binding's echo, before bind's MarkBound
	if err := c.SetPod(record(p)); err != nil {
		t.Fatal(err)
	}
	if busy := c.InFlight("n1", ""); busy != "ns/p" {
		t.Fatalf("in flight %q after the Binding's echo", busy)
	}
	p.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseAllocated)
	if err := c.SetPod(record(p)); err != nil {
		t.Fatal(err)
	}
	if busy := c.InFlight("n1", ""); busy != "" {
		t.Fatalf("in flight %q once allocated", busy)
	}
	if n, _ := c.Node("n1"); n.GPUs[0].Used.MemMiB != 1000 {
		t.Fatalf("n1 holds %d MiB once its pod is allocated, want 1000", n.GPUs[0].Used.MemMiB)
	}
	if got, _ := c.NamespaceUsage("ns", ""); got.MemMiB != 1000 {
		t.Fatalf("usage %+v, want 1000 MiB", got)
	}
	// A different assignment (another leader's bind of a recreated
	// booking) is read afresh, not taken for an echo.
	q := assigned("p", "n2", 0, 2000)
	q.UID = p.UID
	if err := c.SetPod(record(q)); err != nil {
		t.Fatal(err)
	}
	if got := c.Pods(); len(got) != 1 || !strings.Contains(got[0], "n2") {
		t.Fatalf("pods %v, want p on n2", got)
	}
}

// A bind books its pod before its Binding lands (Book). An informer event
// that shows the pod without a node (the pod's own creation, or a status
// change, delivered late) is older than the bind's writes and must leave
// that booking alone: dropping it would free the room and the node's
// in-flight slot for a second bind while the first pod is being bound.
// Once an event has shown the assignment, the API's word counts again,
// and a deletion always does.
func TestBindsOwnBookingOutlivesOlderEvents(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 1, "10"))
	p := pendingAssigned("p", 1000)
	older := p.DeepCopy()
	older.Annotations = nil
	mustBook(t, c, p, 0)
	if err := c.SetPod(record(older)); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.NamespaceUsage("ns", ""); got.MemMiB != 1000 {
		t.Fatalf("an event older than the bind dropped its booking: %+v", got)
	}
	c.MarkBound(p.UID, "n1") // the Binding landed
	_ = c.SetPod(record(older))
	if busy := c.InFlight("n1", ""); busy != "ns/p" {
		t.Fatalf("in flight %q after an older event; want ns/p", busy)
	}
	c.DeletePod(p.UID)
	if got := c.Pods(); len(got) != 0 {
		t.Fatalf("a deleted pod is still booked: %v", got)
	}

	// Shown by its echo, then cleared: unbooked.
	q := pendingAssigned("q", 2000)
	mustBook(t, c, q, 0)
	if err := c.SetPod(record(q)); err != nil {
		t.Fatal(err)
	}
	cleared := q.DeepCopy()
	cleared.Annotations = nil
	if err := c.SetPod(record(cleared)); err != nil {
		t.Fatal(err)
	}
	if got := c.Pods(); len(got) != 0 {
		t.Fatalf("an assignment cleared after its echo is still booked: %v", got)
	}
}

// A failed bind takes back what it booked (Release), and the books go back
// to what the API last showed of the pod; only its own booking, never one
// shown by the API.
func TestReleaseGoesBackToWhatTheAPIShows(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 1, "10"))
	c.SetNode(gpuNode("n2", 1, "10"))
	usage := func() string { return fmt.Sprint(c.Pods(), usedMiB(c.NamespaceUsage("ns", ""))) }

	// Whatever the API shows of the pod (here an assignment without a
	// node, which vgpud never writes but the books still take as shown):
	// a bind books over it and fails; what the API showed is booked again.
	left := assigned("p", "n2", 0, 3000)
	left.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseBound)
	left.Status.Phase = corev1.PodPending
	if err := c.SetPod(record(left)); err != nil {
		t.Fatal(err)
	}
	p := pendingAssigned("p", 1000)
	token := mustBook(t, c, p, 0)
	if got := usage(); got != "[ns/p@n1] 1000" {
		t.Fatalf("booked over what the API showed: %s", got)
	}
	c.Release(p.UID, token)
	if got := usage(); got != "[ns/p@n2] 3000" {
		t.Fatalf("released: %s, want what the API showed back", got)
	}

	// A bind books twice (its reservation, then before its Binding) and
	// fails: the leftover is back, and the first token takes nothing.
	reserved := mustBook(t, c, p, 0)
	again := pendingAssigned("p", 2000)
	placed := mustBook(t, c, again, reserved)
	if got := usage(); got != "[ns/p@n1] 2000" {
		t.Fatalf("booked again: %s", got)
	}
	c.Release(p.UID, reserved)
	if got := usage(); got != "[ns/p@n1] 2000" {
		t.Fatalf("an earlier token released the later booking: %s", got)
	}
	c.Release(p.UID, placed)
	if got := usage(); got != "[ns/p@n2] 3000" {
		t.Fatalf("released after two bookings: %s, want what the API showed back", got)
	}

	// The API's assignment cleared while a bind held its own booking: the
	// event is kept beneath, and a release leaves nothing.
	token = mustBook(t, c, p, 0)
	cleared := left.DeepCopy()
	cleared.Annotations = nil
	if err := c.SetPod(record(cleared)); err != nil {
		t.Fatal(err)
	}
	if got := usage(); got != "[ns/p@n1] 1000" {
		t.Fatalf("an older event replaced the bind's booking: %s", got)
	}
	c.Release(p.UID, token)
	if got := usage(); got != "[] 0" {
		t.Fatalf("released after the API cleared it: %s, want nothing", got)
	}

	// Shown by its echo: no release takes it back.
	q := pendingAssigned("q", 2000)
	token = mustBook(t, c, q, 0)
	q.Spec.NodeName = "n1"
	if err := c.SetPod(record(q)); err != nil {
		t.Fatal(err)
	}
	c.Release(q.UID, token)
	if got, _ := c.NamespaceUsage("ns", ""); got.MemMiB != 2000 {
		t.Fatalf("a booking the API showed was released: %+v", got)
	}
}

// A second bind of a pod while the first is under way (kube-scheduler
// retried it meanwhile) books nothing: the first may still land, and
// moving its booking would free its room and node's in-flight slot. Once
// the API shows the pod bound, that booking is the pod's own truth, and a
// bind that books over it and fails puts it back.
func TestAnotherBindsBookingIsLeftAlone(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 1, "10"))
	c.SetNode(gpuNode("n2", 1, "10"))
	p := pendingAssigned("p", 1000)
	mustBook(t, c, p, 0)
	other := assigned("p", "n2", 0, 3000)
	book := func() (uint64, bool) {
		return c.Book(record(other), assignmentOf(t, other), other.Annotations[wellknown.AnnotationAssignment], 0)
	}
	if _, ok := book(); ok {
		t.Fatal("booked over another bind's booking under way")
	}
	c.MarkBound(p.UID, "n1") // the first bind's Binding landed
	if _, ok := book(); ok {
		t.Fatal("booked over a bind's booking whose Binding landed")
	}
	if got, busy := c.Pods(), c.InFlight("n1", ""); len(got) != 1 || got[0] != "ns/p@n1" || busy != "ns/p" {
		t.Fatalf("books %v, in flight %q; want the first bind's, in flight", got, busy)
	}
	p.Spec.NodeName = "n1" // its echo
	if err := c.SetPod(record(p)); err != nil {
		t.Fatal(err)
	}
	token, ok := book() // a replay, with a stale copy of the pod
	if !ok {
		t.Fatal("a booking the API shows blocks a bind")
	}
	c.Release(p.UID, token)
	if got, busy := c.Pods(), c.InFlight("n1", ""); len(got) != 1 || got[0] != "ns/p@n1" || busy != "ns/p" {
		t.Fatalf("after the replay failed: books %v, in flight %q; want p on n1, in flight", got, busy)
	}
}

// pendingAssigned is a pending pod with name's assignment of mem MiB on
// n1, phase bound: what a bind writes.
func pendingAssigned(name string, mem int64) *corev1.Pod {
	p := assigned(name, "n1", 0, mem)
	p.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseBound)
	p.Status.Phase = corev1.PodPending
	return p
}

func assignmentOf(t *testing.T, p *corev1.Pod) protocol.Assignment {
	t.Helper()
	a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// mustBook books p's assignment as a bind holding token held would.
func mustBook(t *testing.T, c *Ledger, p *corev1.Pod, held uint64) uint64 {
	t.Helper()
	token, ok := c.Book(record(p), assignmentOf(t, p), p.Annotations[wellknown.AnnotationAssignment], held)
	if !ok {
		t.Fatalf("%s not booked", p.Name)
	}
	return token
}

// During a rolling upgrade a newer leader may have placed a pod with an
// assignment this leader cannot honour. What that pod holds is unknown,
// so its node takes nothing more until the pod is gone or readable; the
// node's other GPUs are not treated as free.
func TestAssignmentFromANewerVgpudBlocksItsNode(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 2, "20"))
	c.SetNode(gpuNode("n2", 2, "20"))
	p := assigned("newer", "n1", 0, 1000)
	p.Spec.NodeName = "n1"
	p.Annotations[wellknown.AnnotationAssignment] = `{"version":1,"requires":["mps"],"node":"n1","containers":[{"name":"c0","gpus":[{"uuid":"GPU-n1-0","memoryMiB":1000,"cores":10}]}],"mps":{}}`
	err := c.SetPod(record(p))
	if !errors.Is(err, protocol.ErrUnsupported) {
		t.Fatalf("SetPod: %v, want the newer assignment reported as unsupported", err)
	}
	if _, r := c.Node("n1"); r == nil || r.Kind != "assignment from a newer vgpud" || !strings.Contains(r.Text, "requires mps") {
		t.Fatalf("n1: reason %+v, want the node blocked by the newer assignment", r)
	}
	if _, r := c.Node("n2"); r != nil {
		t.Errorf("n2, with no such pod: %+v", r)
	}
	// Its charge is unknown too: its namespace's quota cannot be checked.
	if _, err := c.NamespaceUsage("ns", ""); err == nil || !strings.Contains(err.Error(), "pod ns/newer holds GPUs on node n1 under an assignment a newer vgpud wrote") {
		t.Errorf("namespace usage with the pod unreadable: %v", err)
	}
	if _, err := c.NamespaceUsage("other", ""); err != nil {
		t.Errorf("another namespace: %v", err)
	}
	// Readable again (the newer leader rolled back and rewrote it): the
	// node serves, and the pod is booked.
	readable := assigned("newer", "n1", 0, 1000)
	readable.Spec.NodeName = "n1"
	if err := c.SetPod(record(readable)); err != nil {
		t.Fatal(err)
	}
	if n, r := c.Node("n1"); r != nil || n.GPUs[0].Used.MemMiB != 1000 {
		t.Fatalf("n1 after the rewrite: %+v %+v", n, r)
	}
	// Unreadable again, then deleted: the node serves once more.
	if err := c.SetPod(record(p)); !errors.Is(err, protocol.ErrUnsupported) {
		t.Fatal(err)
	}
	c.DeletePod(p.UID)
	if _, r := c.Node("n1"); r != nil {
		t.Errorf("n1 after the pod is gone: %+v", r)
	}
}

// usedMiB is a namespace's charged memory, -1 where it is unknown.
func usedMiB(u podmodel.Usage, err error) int64 {
	if err != nil {
		return -1
	}
	return u.MemMiB
}

// An operator's cordon reaches the books, the metrics' stats included,
// and lifting it frees the GPUs again; one the books cannot read keeps
// the node out of new placements, saying why.
func TestCordonReachesTheBooks(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	n := gpuNode("n1", 3, "3")
	n.Annotations[wellknown.AnnotationCordon] = "GPU-n1-0, 2"
	c.SetNode(n)
	if err := c.SetPod(record(assigned("running", "n1", 0, 1000))); err != nil {
		t.Fatal(err)
	}
	got, r := c.Node("n1")
	if r != nil || !got.GPUs[0].Cordoned || got.GPUs[1].Cordoned || !got.GPUs[2].Cordoned || got.GPUs[0].Used.MemMiB != 1000 {
		t.Fatalf("cordoned node: %+v, %v", got.GPUs, r)
	}
	st := c.Stats()
	if len(st) != 1 || !st[0].Serving || !st[0].GPUs[0].Cordoned || st[0].GPUs[1].Cordoned {
		t.Fatalf("stats: %+v", st)
	}
	freed := 0
	c.NotifyFreed(func() { freed++ })
	c.SetNode(n)
	if freed != 0 {
		t.Fatal("pods nudged while the cordon stands")
	}
	delete(n.Annotations, wellknown.AnnotationCordon)
	c.SetNode(n)
	if got, _ := c.Node("n1"); got.GPUs[0].Cordoned || got.GPUs[2].Cordoned || freed != 1 {
		t.Fatalf("after the cordon was lifted: %+v, nudged %d times", got.GPUs, freed)
	}
	n.Annotations[wellknown.AnnotationCordon] = "all of them"
	c.SetNode(n)
	if _, r := c.Node("n1"); r == nil || r.Kind != "unreadable gpu cordon" || !strings.Contains(r.Text, `"all of them"`) {
		t.Fatalf("unreadable cordon: %+v", r)
	}
}

// A bound pod one of whose GPUs left the node stays booked on the rest,
// also in a leader's books built after the GPU left: otherwise its other
// GPU would look free while the pod runs on it.
func TestAPodOnAGoneGPUKeepsTheRestBooked(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 1, "10")) // GPU-n1-1 is gone
	p := assigned("pair", "n1", 0, 1000)
	p.Spec.NodeName = "n1"
	p.Annotations[wellknown.AnnotationAssignment] = strings.Replace(p.Annotations[wellknown.AnnotationAssignment], `"cores":10}`, `"cores":10},{"uuid":"GPU-n1-1","memoryMiB":1000,"cores":10}`, 1)
	if !strings.Contains(p.Annotations[wellknown.AnnotationAssignment], "GPU-n1-1") {
		t.Fatalf("assignment %s", p.Annotations[wellknown.AnnotationAssignment])
	}
	if err := c.SetPod(record(p)); err != nil {
		t.Fatal(err)
	}
	n, _ := c.Node("n1")
	if n.GPUs[0].Used.MemMiB != 1000 {
		t.Fatalf("GPU-n1-0 books %+v; want the pod's slice", n.GPUs[0].Used)
	}
	// Its only GPU gone, a bound pod holds nothing, and counts again when
	// the GPU comes back.
	one := assigned("one", "n1", 0, 2000)
	one.Spec.NodeName = "n1"
	one.Annotations[wellknown.AnnotationAssignment] = strings.ReplaceAll(one.Annotations[wellknown.AnnotationAssignment], "GPU-n1-0", "GPU-n1-1")
	if err := c.SetPod(record(one)); err != nil {
		t.Fatal(err)
	}
	c.SetNode(gpuNode("n1", 2, "20"))
	n, _ = c.Node("n1")
	if n.GPUs[1].Used.MemMiB != 3000 {
		t.Fatalf("GPU-n1-1 back books %+v; want both pods' slices", n.GPUs[1].Used)
	}
}

// A node serving DRA claims serves its GPUs (the stats and the alert on
// them say so) but takes no pod of the extender's; a draining one does
// neither.
func TestStatsServingClaims(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	for name, plugin := range map[string]string{"dra": wellknown.PluginClaims, "going": wellknown.PluginDraining} {
		n := gpuNode(name, 1, "0")
		n.Annotations[wellknown.AnnotationPlugin] = plugin
		c.SetNode(n)
	}
	st := c.Stats()
	if len(st) != 2 || !st[0].Serving || st[1].Serving {
		t.Fatalf("stats %+v; want dra serving, going not", st)
	}
	if _, r := c.Node("dra"); r == nil || r.Kind != "serves DRA claims" || r.Passing {
		t.Fatalf("the extender on a DRA node: %+v; want refused, not serving the device plugin", r)
	}
}
