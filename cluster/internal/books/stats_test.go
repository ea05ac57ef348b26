package books

import (
	"testing"

	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// The metrics' view: nodes with an inventory, serving or not; a deleted
// node is gone from it, so no alert stays on a node that is no more.
func TestStats(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 2, "20"))
	c.SetNode(gpuNode("n2", 1, "0")) // its plugin not registered with kubelet
	if err := c.SetPod(record(assigned("a", "n1", 0, 1000))); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if len(st) != 2 || !st[0].Serving || st[1].Serving || len(st[0].GPUs) != 2 || st[0].GPUs[0].Used.MemMiB != 1000 || st[0].GPUs[0].MemoryMiB != 40000 {
		t.Fatalf("stats %+v", st)
	}
	c.DeleteNode("n2")
	if st := c.Stats(); len(st) != 1 || st[0].Name != "n1" {
		t.Fatalf("after n2 is deleted: %+v", st)
	}
	if got := c.Charged()["ns"]; got.MemMiB != 1000 || got.Slots != 1 {
		t.Fatalf("charged %+v", got)
	}
}
