package books

import (
	"sort"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
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
		used := make(map[string]podmodel.Usage, len(st.current.GPUs))
		for _, g := range st.current.GPUs {
			used[g.UUID] = g.Used
		}
		n := NodeStats{Name: name, Serving: st.invErr == nil && st.cordonErr == nil && len(st.gpus) > 0 && st.usable && st.plugin == protocol.PluginServing}
		for _, g := range st.gpus {
			n.GPUs = append(n.GPUs, GPUStats{GPU: g, Used: used[g.UUID], Cordoned: st.cordoned[g.UUID], MIG: st.mig[g.UUID]})
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
	return out
}
