package gpuuse

import (
	"github.com/vgpud/vgpud/node/internal/nrihook"
	"github.com/vgpud/vgpud/node/internal/usage"
	"github.com/vgpud/vgpud/protocol"
)

// grantedContainers is the hook's view into the enforcer's register: each
// grant, with its slices, by the runtime's container ID. What goes is
// forgotten by the metrics and the recorder too, so that nothing per pod
// outlives the pod.
type grantedContainers struct {
	r *usage.Containers
	w *Monitor
}

var _ nrihook.Granted = grantedContainers{}

func (g grantedContainers) Granted(id string, c nrihook.NamedContainer, a protocol.ContainerAssignment) {
	slices := make(map[string]usage.Share, len(a.GPUs))
	for _, s := range a.GPUs {
		// A MIG instance's slice is found on its GPU when a sample is
		// decided (usage.Sample.Parents): the hook may grant before the
		// node role has read its GPUs.
		sh := usage.Share{MemoryBytes: uint64(max(s.MemoryMiB, 0)) << 20, Cores: s.Cores}
		// A claim's share is its claim's device: every container that
		// reaches it is held to it together (one per GPU: the hook
		// refuses two shares of one GPU to a container).
		for _, g := range c.Claimed {
			if g.Share && g.Slice.UUID == s.UUID {
				sh.Pool, sh.Claim = g.CDI, g.Claim
			}
		}
		slices[s.UUID] = sh
		// From 0, so that the first kill shows in an increase().
		g.w.metrics.KillsFrom0(c.Namespace, c.Pod, c.Name, s.UUID)
	}
	g.r.Add(usage.Container{ID: id, Namespace: c.Namespace, Pod: c.Pod, PodUID: c.UID, Name: c.Name, Slices: slices})
}

func (g grantedContainers) Removed(uid string) { g.forget(g.r.RemovePod(uid)) }

func (g grantedContainers) Retain(ids map[string]bool) { g.forget(g.r.Retain(ids)) }

func (g grantedContainers) forget(gone []usage.Container) {
	g.w.mu.Lock()
	rec := g.w.rec
	g.w.mu.Unlock()
	for _, c := range gone {
		if rec != nil {
			rec.forget(c.ID)
		}
		if !g.r.Has(c.Namespace, c.Pod) {
			g.w.metrics.ForgetPod(c.Namespace, c.Pod)
		}
	}
}

// Granted is the hook's view into the enforcer's register.
func (w *Monitor) Granted() nrihook.Granted { return grantedContainers{r: w.containers, w: w} }
