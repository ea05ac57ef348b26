package books

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// withHeld sets n's usage annotation to a sample whose GPUs hold held
// beyond their bookings.
func withHeld(t *testing.T, n *corev1.Node, held ...protocol.GPUHeld) {
	t.Helper()
	raw, err := protocol.EncodeUsage(protocol.NodeUsage{Mode: "enforce", Held: held})
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[wellknown.AnnotationUsage] = raw
}

// fitsOn is whether a pod asking one GPU with mib fits node on c's books.
func fitsOn(t *testing.T, c *Ledger, node string, mib int64) *fit.Reason {
	t.Helper()
	n, r := c.Node(node)
	if r != nil {
		t.Fatalf("node %s unusable: %+v", node, r)
	}
	req := fit.Request{Containers: []podmodel.ContainerRequest{{Name: "c", GPUs: 1, HasGPUs: true, MemoryMiB: mib}}}
	return fit.Fits(n, req, fit.Options{DefaultMemPercent: 100})
}

// What a node reports its GPUs hold beyond their bookings is not free:
// a pod that fits the bookings alone is refused, and says why; a full
// GPU takes nothing. A node publishing none, or a value that does not
// read, holds nothing and stays usable.
func TestHeldMemoryReachesTheBooks(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	n := gpuNode("n1", 1, "10") // 40000 MiB
	c.SetNode(n)
	if err := c.SetPod(record(assigned("a", "n1", 0, 8000))); err != nil {
		t.Fatal(err)
	}
	if r := fitsOn(t, c, "n1", 10000); r != nil {
		t.Fatalf("refused before anything is held: %+v", r)
	}
	withHeld(t, n, protocol.GPUHeld{GPU: "GPU-n1-0", MiB: 30000}, protocol.GPUHeld{GPU: "GPU-elsewhere", MiB: 1000})
	c.SetNode(n)
	r := fitsOn(t, c, "n1", 10000)
	if r == nil || r.Kind != "insufficient gpumem" || !strings.Contains(r.Text, "largest free 2000 MiB (30000 MiB held beyond bookings, as the node reports) < 10000") {
		t.Fatalf("with 30000 MiB held: %+v", r)
	}
	if r := fitsOn(t, c, "n1", 2000); r != nil {
		t.Fatalf("what is left is not placed: %+v", r)
	}
	if st := c.Stats(); st[0].GPUs[0].Held != 30000 || st[0].GPUs[0].Full || st[0].GPUs[0].Used.MemMiB != 8000 {
		t.Fatalf("stats: %+v", st[0].GPUs[0])
	}

	withHeld(t, n, protocol.GPUHeld{GPU: "GPU-n1-0", MiB: 1000, Full: true})
	c.SetNode(n)
	if r := fitsOn(t, c, "n1", 1); r == nil || r.Kind != "gpu full" {
		t.Fatalf("a full GPU: %+v", r)
	}
	if st := c.Stats(); !st[0].GPUs[0].Full {
		t.Fatalf("stats of a full GPU: %+v", st[0].GPUs[0])
	}

	for _, bad := range []struct{ name, raw string }{
		{"garbage", "{"},
		{"invalid", `{"version":1,"mode":"enforce","containers":[],"held":[{"gpu":"GPU-n1-0","mib":-5}]}`},
		{"gone", ""},
	} {
		withHeld(t, n, protocol.GPUHeld{GPU: "GPU-n1-0", MiB: 30000, Full: true})
		c.SetNode(n)
		if bad.raw == "" {
			delete(n.Annotations, wellknown.AnnotationUsage)
		} else {
			n.Annotations[wellknown.AnnotationUsage] = bad.raw
		}
		c.SetNode(n)
		if r := fitsOn(t, c, "n1", 30000); r != nil {
			t.Errorf("usage %s: %+v; want nothing held", bad.name, r)
		}
	}
}

// Memory a GPU held freed is room freed, as a pod's going is: pods
// refused meanwhile are nudged. More held, or the same, nudges none.
func TestHeldMemoryFreedNudgesRefusedPods(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	freed := 0
	c.NotifyFreed(func() { freed++ })
	n := gpuNode("n1", 2, "20")
	c.SetNode(n) // its GPUs new: a nudge of their own
	for i, step := range []struct {
		held  []protocol.GPUHeld // nil: no annotation
		nudge bool
	}{
		{held: []protocol.GPUHeld{{GPU: "GPU-n1-0", MiB: 20000}}},
		{held: []protocol.GPUHeld{{GPU: "GPU-n1-0", MiB: 20000}}},
		{held: []protocol.GPUHeld{{GPU: "GPU-n1-0", MiB: 25000}, {GPU: "GPU-n1-1", MiB: 100, Full: true}}},
		{held: []protocol.GPUHeld{{GPU: "GPU-n1-0", MiB: 24000}, {GPU: "GPU-n1-1", MiB: 100, Full: true}}, nudge: true},
		{held: []protocol.GPUHeld{{GPU: "GPU-n1-0", MiB: 24000}, {GPU: "GPU-n1-1", MiB: 100}}, nudge: true},
		{held: []protocol.GPUHeld{{GPU: "GPU-n1-0", MiB: 24000}, {GPU: "GPU-n1-1", MiB: 100}}},
		{nudge: true},
	} {
		delete(n.Annotations, wellknown.AnnotationUsage)
		if step.held != nil {
			withHeld(t, n, step.held...)
		}
		before := freed
		c.SetNode(n)
		if got := freed > before; got != step.nudge {
			t.Errorf("step %d (held %+v): nudged %v, want %v", i, step.held, got, step.nudge)
		}
	}
}

// What a GPU in MIG mode holds is its whole GPU's, not any instance's:
// the instances are left as the bookings say.
func TestHeldMemoryLeavesMIGInstancesAlone(t *testing.T) {
	raw, err := protocol.EncodeInventory(migInventory())
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{wellknown.AnnotationGPUs: raw, wellknown.AnnotationPlugin: wellknown.PluginServing}}}
	withHeld(t, n, protocol.GPUHeld{GPU: "GPU-m", MiB: 40000, Full: true}, protocol.GPUHeld{GPU: "MIG-a", MiB: 100, Full: true}, protocol.GPUHeld{GPU: "GPU-s", MiB: 500})
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(n)
	got, _ := c.Node("n1")
	for _, g := range got.GPUs {
		want := int64(0)
		if g.UUID == "GPU-s" {
			want = 500
		}
		if g.Held != want || g.Full {
			t.Errorf("GPU %s: held %d, full %v; want %d, not full", g.UUID, g.Held, g.Full, want)
		}
	}
}

// The leader's node informer keeps the usage annotation SetNode reads.
func TestTransformKeepsANodesUsage(t *testing.T) {
	n := gpuNode("n1", 1, "10")
	withHeld(t, n, protocol.GPUHeld{GPU: "GPU-n1-0", MiB: 30000})
	out, err := Transform(wellknown.DefaultResourceNames())(n)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*corev1.Node).Annotations[wellknown.AnnotationUsage]; got != n.Annotations[wellknown.AnnotationUsage] {
		t.Fatalf("usage after the transform %q, want %q", got, n.Annotations[wellknown.AnnotationUsage])
	}
}

// A GPU listed twice counts the larger figure, and is full if either
// entry says so.
func TestHeldTakesTheSaferOfTwoEntries(t *testing.T) {
	got := Held(protocol.NodeUsage{Held: []protocol.GPUHeld{{GPU: "GPU-0", MiB: 300, Full: true}, {GPU: "GPU-0", MiB: 700}, {GPU: "GPU-1", MiB: 5}}})
	if len(got) != 2 || got["GPU-0"].MiB != 700 || !got["GPU-0"].Full || got["GPU-1"].MiB != 5 {
		t.Fatalf("held %+v", got)
	}
	if Held(protocol.NodeUsage{}) != nil {
		t.Fatal("nothing held is not nil")
	}
}

// SmallestGPUMiB follows nodes as they come, change and go, though it
// is not found again for each question.
func TestSmallestGPUMiBFollowsTheNodes(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	if got := c.SmallestGPUMiB(); got != 0 {
		t.Fatalf("no nodes: %d, want 0", got)
	}
	c.SetNode(gpuNode("big", 2, "80"))
	if got := c.SmallestGPUMiB(); got != 40000 {
		t.Fatalf("one node of 40000 MiB GPUs: %d", got)
	}
	small := gpuNode("small", 1, "40")
	inv, err := protocol.DecodeInventory(small.Annotations[wellknown.AnnotationGPUs])
	if err != nil {
		t.Fatal(err)
	}
	inv.GPUs[0].MemoryMiB = 16000
	raw, err := protocol.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	small.Annotations[wellknown.AnnotationGPUs] = raw
	c.SetNode(small)
	if got := c.SmallestGPUMiB(); got != 16000 {
		t.Fatalf("a 16000 MiB GPU joined: %d", got)
	}
	if got := c.SmallestGPUMiB(); got != 16000 { // kept
		t.Fatalf("asked again: %d", got)
	}
	c.DeleteNode("small")
	if got := c.SmallestGPUMiB(); got != 40000 {
		t.Fatalf("the small node gone: %d, want 40000", got)
	}
}
