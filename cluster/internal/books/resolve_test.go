package books

import (
	"runtime"
	"slices"
	"testing"

	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// The names a walk kept resolved answer as the books do now: a node
// that arrives after its name resolved to none is seen, as is a node's
// changed inventory, through the same slice or an equal one.
func TestEachNodeForKeepsNoStaleResolution(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 1, "10"))
	names := []string{"n1", "later"}
	for range eachNodeRun { // the resolution spans runs under the lock
		names = append(names, "n1")
	}
	gpus := func(names []string) []int {
		out := make([]int, len(names))
		c.EachNodeFor(names, "", func(i int, n fit.Node, _ int64, reason *fit.Reason) bool {
			out[i] = len(n.GPUs)
			if reason != nil {
				out[i] = -1
			}
			return true
		})
		return out
	}
	if got := gpus(names); got[0] != 1 || got[1] != -1 || got[len(got)-1] != 1 {
		t.Fatalf("first walk: %v", got[:3])
	}
	if r := c.resolved.Load(); r == nil || len(r.states) != len(names) || r.states[1] != nil {
		t.Fatalf("the walk kept no resolution of its names: %+v", r)
	}
	c.SetNode(gpuNode("later", 2, "10"))
	if got := gpus(names); got[1] != 2 {
		t.Errorf("a node added after its name resolved to none: %d GPUs, want 2", got[1])
	}
	c.SetNode(gpuNode("n1", 3, "10"))
	if got := gpus(names); got[0] != 3 || got[len(got)-1] != 3 {
		t.Errorf("a node's new inventory, same slice: %v, want 3 GPUs", got[:3])
	}
	equal := slices.Clone(names)
	if got := gpus(equal); got[0] != 3 || got[1] != 2 {
		t.Errorf("an equal slice: %v", got[:3])
	}
	other := []string{"later", "n1"}
	if got := gpus(other); got[0] != 2 || got[1] != 3 {
		t.Errorf("other names: %v, want [2 3]", got)
	}
	// A walk stopped early keeps nothing: its resolution is partial.
	kept := c.resolved.Load()
	c.EachNodeFor(names, "", func(int, fit.Node, int64, *fit.Reason) bool { return false })
	if c.resolved.Load() != kept {
		t.Error("a walk stopped at its first node replaced the kept resolution")
	}
}

// A node added while a walk is between two of its runs (the writer took
// the lock the walk let go) is seen by the rest of that walk, and the
// walk keeps no resolution that would hide it from the next one.
func TestEachNodeForSeesANodeAddedBetweenRuns(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 1, "10"))
	names := []string{"late"}
	for len(names) < eachNodeRun {
		names = append(names, "n1")
	}
	names = append(names, "late") // the second run's first name
	gpus := func(writer func()) []int {
		out := make([]int, len(names))
		c.EachNodeFor(names, "", func(i int, n fit.Node, _ int64, reason *fit.Reason) bool {
			out[i] = len(n.GPUs)
			if reason != nil {
				out[i] = -1
			}
			if i == eachNodeRun-1 && writer != nil {
				writer()
			}
			return true
		})
		return out
	}
	added := make(chan struct{})
	first := gpus(func() {
		go func() {
			c.SetNode(gpuNode("late", 2, "10"))
			close(added)
		}()
		// TryRLock fails once the writer waits for this run's read lock:
		// from then on the next run cannot take it before the writer.
		for c.mu.TryRLock() {
			c.mu.RUnlock()
			runtime.Gosched()
		}
	})
	<-added
	if first[0] != -1 || first[eachNodeRun] != 2 {
		t.Fatalf("the walk across the add: late read %d before it and %d after, want -1 and 2", first[0], first[eachNodeRun])
	}
	if got := gpus(nil); got[0] != 2 || got[eachNodeRun] != 2 {
		t.Errorf("the next walk: late read %d and %d, want 2: a resolution from before the add was kept", got[0], got[eachNodeRun])
	}
	if got := gpus(nil); got[0] != 2 {
		t.Errorf("the walk after: late read %d, want 2", got[0])
	}
}
