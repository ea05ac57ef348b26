package books

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// runningOn is assigned, in namespace ns, bound to node and running.
func runningOn(name, ns, node string, mem int64) *corev1.Pod {
	p := assigned(name, node, 0, mem)
	p.Namespace, p.Spec.NodeName, p.Status.Phase = ns, node, corev1.PodRunning
	return p
}

// Memory a node says a pod's processes hold is charged to the namespace
// the books held that pod in on that GPU, live or ended, never beyond
// what the GPU holds; a pod they never held there, or one they forgot
// once nothing named it, is charged to nobody.
func TestHeldMemoryIsChargedToThePodsNamespace(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clk)
	n := gpuNode("n1", 2, "20")
	c.SetNode(n)
	gone, live := runningOn("gone", "team-a", "n1", 2000), runningOn("live", "team-b", "n1", 2000)
	other := runningOn("other", "team-c", "n2", 2000) // booked on another node
	c.SetNode(gpuNode("n2", 1, "10"))
	for _, p := range []*corev1.Pod{gone, live, other} {
		if err := c.SetPod(record(p)); err != nil {
			t.Fatal(err)
		}
	}
	c.DeletePod(gone.UID)
	withHeld(t, n, protocol.GPUHeld{GPU: "GPU-n1-0", MiB: 9000, Pods: []protocol.HeldPod{
		{UID: string(gone.UID), MiB: 6000}, // its memory, after it was deleted
		{UID: string(live.UID), MiB: 2000}, // past its slice
		{UID: string(other.UID), MiB: 500}, // another node's pod: not this node's to charge
		{UID: "uid-never", MiB: 500},
	}}, protocol.GPUHeld{GPU: "GPU-n1-1", MiB: 3000, Pods: []protocol.HeldPod{
		{UID: string(live.UID), MiB: 3000}, // a GPU it was not booked on
	}})
	c.SetNode(n)
	charged := func(ns string) int64 {
		u, err := c.NamespaceUsage(ns, "")
		if err != nil {
			t.Fatal(err)
		}
		return u.MemMiB
	}
	if got := c.HeldCharge("team-a").MemMiB; got != 6000 || charged("team-a") != 6000 {
		t.Errorf("team-a held %d, in use %d; want 6000 for its deleted pod", got, charged("team-a"))
	}
	if got := c.HeldCharge("team-b").MemMiB; got != 2000 || charged("team-b") != 4000 {
		t.Errorf("team-b held %d, in use %d; want 2000 past its slice, 4000 with the slice", got, charged("team-b"))
	}
	if got := c.HeldCharge("team-c").MemMiB; got != 0 {
		t.Errorf("team-c charged %d for a node its pod is not on", got)
	}
	if got := c.Charged()["team-a"].MemMiB; got != 6000 {
		t.Errorf("the metrics' charge of team-a: %d", got)
	}

	// A node that names more than the GPU holds charges no more than it.
	withHeld(t, n, protocol.GPUHeld{GPU: "GPU-n1-0", MiB: 1000, Pods: []protocol.HeldPod{{UID: string(gone.UID), MiB: 1000}, {UID: string(live.UID), MiB: 1000}}})
	c.SetNode(n)
	if a, b := c.HeldCharge("team-a").MemMiB, c.HeldCharge("team-b").MemMiB; a+b != 1000 {
		t.Errorf("charged %d + %d for 1000 MiB held", a, b)
	}

	// Nor more than the GPU has (40000 MiB), whatever it says it holds.
	withHeld(t, n, protocol.GPUHeld{GPU: "GPU-n1-0", MiB: 900000, Pods: []protocol.HeldPod{{UID: string(gone.UID), MiB: 900000}}})
	c.SetNode(n)
	if got := c.HeldCharge("team-a").MemMiB; got != 40000 {
		t.Errorf("team-a charged %d for a GPU of 40000 MiB", got)
	}

	// Freed: charged nothing. Once nothing names it past pastKeep, the
	// ended pod is forgotten: a node naming it later charges nobody.
	delete(n.Annotations, wellknown.AnnotationUsage)
	c.SetNode(n)
	if got := c.HeldCharge("team-a"); got.MemMiB != 0 {
		t.Errorf("team-a charged %d once freed", got.MemMiB)
	}
	clk.SetTime(clk.Now().Add(pastKeep + time.Second))
	c.SetNode(n)
	withHeld(t, n, protocol.GPUHeld{GPU: "GPU-n1-0", MiB: 6000, Pods: []protocol.HeldPod{{UID: string(gone.UID), MiB: 6000}}})
	c.SetNode(n)
	if got := c.HeldCharge("team-a"); got.MemMiB != 0 {
		t.Errorf("team-a charged %d for a pod long forgotten", got.MemMiB)
	}
}

// A pod that ended before this leader started is known from its own
// assignment, as a booking would be.
func TestHeldMemoryOfAPodThatEndedBeforeTheLeader(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	n := gpuNode("n1", 1, "10")
	withHeld(t, n, protocol.GPUHeld{GPU: "GPU-n1-0", MiB: 5000, Pods: []protocol.HeldPod{{UID: "uid-done", MiB: 5000}}})
	c.SetNode(n)
	done := runningOn("done", "team-a", "n1", 1000)
	done.Status.Phase = corev1.PodSucceeded
	if err := c.SetPod(record(done)); err != nil {
		t.Fatal(err)
	}
	if got := c.HeldCharge("team-a").MemMiB; got != 5000 {
		t.Errorf("team-a charged %d; want 5000", got)
	}
	if c.PodCount() != 0 {
		t.Errorf("a terminated pod booked: %v", c.Pods())
	}
}

// An instance made on demand that processes keep after its pod ended is
// charged, memory and SMs, to the namespace of the pod it was made for,
// as the books booked it, until the node lists it no more.
func TestKeptInstanceIsChargedToItsLastPod(t *testing.T) {
	inv := protocol.Inventory{MIG: []protocol.MIGGPU{{UUID: "GPU-h", Index: 0, Model: "H100", MemoryMiB: 81920, SMs: 132, Healthy: true,
		Possible: []protocol.MIGInstance{{UUID: protocol.OnDemandID("GPU-h", "3g.40gb", 0), Profile: "3g.40gb", MemoryMiB: 40192, SMs: 60, Start: 0, Size: 4}}}}}
	id := inv.MIG[0].Possible[0].UUID
	setInv := func(n *corev1.Node, inv protocol.Inventory) {
		raw, err := protocol.EncodeInventory(inv)
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations[wellknown.AnnotationGPUs] = raw
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{wellknown.AnnotationPlugin: wellknown.PluginServing}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("10")}}}
	setInv(n, inv)
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(n)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "team-a", UID: "uid-big"},
		Spec: corev1.PodSpec{SchedulerName: "vgpud-scheduler", NodeName: "n1", Containers: []corev1.Container{{Name: "c"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	raw, err := protocol.EncodeAssignment(protocol.Assignment{Node: "n1", Containers: []protocol.ContainerAssignment{{Name: "c",
		GPUs: []protocol.GPUSlice{{UUID: id, MemoryMiB: 40192, Cores: 46, MIG: true, Make: true}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations = map[string]string{wellknown.AnnotationAssignment: raw}
	if err := c.SetPod(record(p)); err != nil {
		t.Fatal(err)
	}
	c.DeletePod(p.UID)
	kept := inv
	kept.MIG = []protocol.MIGGPU{inv.MIG[0]}
	kept.MIG[0].Possible = nil
	kept.MIG[0].Kept = []protocol.MIGInstance{{UUID: id, Profile: "3g.40gb", MemoryMiB: 40192, SMs: 60, Start: 0, Size: 4, Made: "MIG-made", Pod: "uid-big"}}
	setInv(n, kept)
	c.SetNode(n)
	if got := c.HeldCharge("team-a"); got.MemMiB != 40192 || got.Cores != 46 {
		t.Errorf("team-a charged %+v for its kept instance; want 40192 MiB, 46 cores", got)
	}
	// Named for a pod the books never held there: charged to nobody.
	kept.MIG[0].Kept[0].Pod = "uid-other"
	setInv(n, kept)
	c.SetNode(n)
	if got := c.HeldCharge("team-a"); got.MemMiB != 0 {
		t.Errorf("team-a charged %+v for an instance kept for another pod", got)
	}
	setInv(n, inv) // destroyed: offered again
	c.SetNode(n)
	if got := c.HeldCharge("team-a"); got.MemMiB != 0 || got.Cores != 0 {
		t.Errorf("team-a charged %+v once the instance went", got)
	}
}

// What a live pod holds past its slices is charged only beyond what its
// booking is charged there already: a slot's share larger than its
// slice covers the first of it. It never reaches past the GPU: its
// booking and what it holds beyond fit the GPU's memory, whatever a node
// says.
func TestHeldMemoryOfALivePodBeyondItsCharge(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	inv := protocol.Inventory{GPUs: []protocol.GPU{{UUID: "GPU-n1-0", MemoryMiB: 40000, Cores: 100, Split: 4, Healthy: true}}}
	raw, err := protocol.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{wellknown.AnnotationGPUs: raw, wellknown.AnnotationPlugin: wellknown.PluginServing}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}}}
	c.SetNode(n)
	small := runningOn("small", "team-a", "n1", 1000) // charged a slot: 10000 MiB
	if err := c.SetPod(record(small)); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct{ past, want int64 }{{5000, 0}, {9000, 0}, {12000, 3000}, {39000, 30000}, {900000, 30000}} {
		withHeld(t, n, protocol.GPUHeld{GPU: "GPU-n1-0", MiB: step.past, Pods: []protocol.HeldPod{{UID: string(small.UID), MiB: step.past}}})
		c.SetNode(n)
		if got := c.HeldCharge("team-a").MemMiB; got != step.want {
			t.Errorf("%d MiB past a 1000 MiB slice charged a 10000 MiB slot: held charge %d, want %d", step.past, got, step.want)
		}
	}
}
