package books

import (
	"sort"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// NodeStats is one GPU node as the books hold it, for the metrics.
type NodeStats struct {
	Name string
	// Serving: the books would place pods there now (an inventory, the
	// device plugin registered with kubelet and serving).
	Serving bool
	GPUs    []GPUStats
}

// GPUStats is one GPU of a node: its inventory and what is booked on it.
type GPUStats struct {
	protocol.GPU
	Used     podmodel.Usage
	Cordoned bool
	// MIG, for a MIG instance, is its GPU; nil for a shared GPU.
	MIG *protocol.MIGRef
	// Held is the MiB a shared GPU holds beyond its bookings, as its
	// node last reported; Full: nothing more is placed there
	// (fit.CommittedGPU).
	Held int64
	Full bool
}

// Stats lists the nodes with a vgpud inventory (readable or not), sorted
// by name, with each GPU's booked usage; a deleted node is not listed.
func (c *Ledger) Stats() []NodeStats {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]NodeStats, 0, len(c.nodes))
	for name, st := range c.nodes {
		if len(st.gpus) == 0 && st.invErr == nil {
			continue // deleted, or no vgpud inventory: not a GPU node of vgpud's
		}
		current := make(map[string]*fit.CommittedGPU, len(st.current.GPUs))
		for i := range st.current.GPUs {
			current[st.current.GPUs[i].UUID] = &st.current.GPUs[i]
		}
		// A node serving DRA claims serves its GPUs, not through the
		// leader: it is not one the extender's alert should call down.
		n := NodeStats{Name: name, Serving: st.invErr == nil && st.cordonErr == nil && len(st.gpus) > 0 &&
			((st.usable && st.plugin == wellknown.PluginServing) || st.plugin == wellknown.PluginClaims)}
		for _, g := range st.gpus {
			s := GPUStats{GPU: g, Cordoned: st.cordoned[g.UUID], MIG: st.mig[g.UUID]}
			if cur := current[g.UUID]; cur != nil {
				s.Used, s.Held, s.Full = cur.Used, cur.Held, cur.Full
			}
			n.GPUs = append(n.GPUs, s)
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Charged is what the booked pods of each namespace are charged
// (podmodel.Placement.Charge), the figure bind checks quota against.
func (c *Ledger) Charged() map[string]podmodel.Usage {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := map[string]podmodel.Usage{}
	for _, p := range c.pods {
		t := out[p.namespace]
		c.addCharge(&t, p)
		out[p.namespace] = t
	}
	for node := range c.charging {
		for ns, u := range c.nodes[node].charges {
			out[ns] = out[ns].Plus(u)
		}
	}
	return out
}
