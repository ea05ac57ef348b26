package books

import (
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// What a GPU holds for a pod beyond its booking: memory the GPU lists
// that a pod's processes opened, past its slice or after it ended
// (protocol.GPUHeld.Pods), and instances made for a pod that has ended
// which processes keep (protocol.MIGGPU.Kept). Each is charged to
// the namespace these books held for that pod on that GPU, never to one
// a node names: a node can charge only the namespaces whose pods the
// leader placed on it, and no more than its GPU holds.

// pastPod is a pod the books held on a node until it ended.
type pastPod struct {
	namespace string
	// devices are the GPUs and instances it was booked on, with each
	// instance's GPU (where the driver lists its processes).
	devices []string
	ended   time.Time
}

// What a node's past pods are kept for: long enough for its next usage
// report (protocol.UsagePublishEvery) to name them, and, while a report
// or a kept instance names one, as long as it does; at most maxPast.
const (
	pastKeep = 5 * time.Minute
	maxPast  = 256
)

// remember records that the pod uid of namespace, booked on node's
// devices by pl, has ended. c.mu held.
func (c *Ledger) remember(node string, uid types.UID, namespace string, pl podmodel.Placement) {
	st := c.node(node)
	var devices []string
	for _, ct := range pl {
		for _, s := range ct.GPUs {
			devices = append(devices, s.UUID)
			if ref := st.mig[s.UUID]; ref != nil {
				devices = append(devices, ref.GPU)
			}
		}
	}
	if len(devices) == 0 {
		return
	}
	if st.past == nil {
		st.past = map[types.UID]pastPod{}
	}
	now := c.clock.Now()
	st.past[uid] = pastPod{namespace: namespace, devices: devices, ended: now}
	c.forget(st, now)
}

// rememberEnded records a terminated pod these books never held (it
// ended before this leader started): where its own assignment, checked
// as any booking is, put it.
func (c *Ledger) rememberEnded(p *slimpod.Pod) {
	if !p.HasAssignment || p.NodeName == "" {
		return
	}
	c.mu.RLock()
	_, booked := c.pods[p.UID]
	st := c.nodes[p.NodeName]
	_, known := st.pastOf(p.UID)
	c.mu.RUnlock()
	if booked || known {
		return
	}
	a, err := c.readAssignment(p)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, booked := c.pods[p.UID]; !booked {
		c.remember(a.Node, p.UID, p.Namespace, podmodel.PlacementOf(a, p.Kinds()))
		c.recompute(a.Node)
	}
}

// pastOf is the past pod uid of st, if st remembers it; st may be nil.
func (st *nodeState) pastOf(uid types.UID) (pastPod, bool) {
	if st == nil {
		return pastPod{}, false
	}
	p, ok := st.past[uid]
	return p, ok
}

// forget drops past pods nothing names any more once pastKeep has gone
// by, and the oldest past maxPast. c.mu held.
func (c *Ledger) forget(st *nodeState, now time.Time) {
	named := map[types.UID]bool{}
	for _, h := range st.held {
		for _, p := range h.Pods {
			named[types.UID(p.UID)] = true
		}
	}
	for id := range st.kept {
		if uid, ok := lastOn(st, id); ok {
			named[uid] = true
		}
	}
	for uid, p := range st.past {
		if !named[uid] && now.Sub(p.ended) > pastKeep {
			delete(st.past, uid)
		}
	}
	if len(st.past) <= maxPast {
		return
	}
	uids := make([]types.UID, 0, len(st.past))
	for uid := range st.past {
		uids = append(uids, uid)
	}
	slices.SortFunc(uids, func(a, b types.UID) int { return st.past[a].ended.Compare(st.past[b].ended) })
	for _, uid := range uids[:len(uids)-maxPast] {
		delete(st.past, uid)
	}
}

// lastOn is the pod last booked on instance id of st that has ended.
func lastOn(st *nodeState, id string) (types.UID, bool) {
	var last types.UID
	found := false
	for uid, p := range st.past {
		if !slices.Contains(p.devices, id) {
			continue
		}
		if !found || p.ended.After(st.past[last].ended) || (p.ended.Equal(st.past[last].ended) && uid > last) {
			last, found = uid, true
		}
	}
	return last, found
}

// heldCharges is what node's GPUs hold beyond bookings, charged by
// namespace; nil where nothing. c.mu held.
func (c *Ledger) heldCharges(name string) map[string]podmodel.Usage {
	st := c.node(name)
	if len(st.held) == 0 && len(st.kept) == 0 {
		return nil
	}
	out := map[string]podmodel.Usage{}
	for _, gpu := range slices.Sorted(maps.Keys(st.held)) {
		// A GPU in MIG mode is charged by its instances, booked or kept,
		// as its placements are (usage): what it holds is not charged
		// twice.
		if !slices.ContainsFunc(st.gpus, func(g protocol.GPU) bool { return g.UUID == gpu && st.mig[gpu] == nil }) {
			continue
		}
		h := st.held[gpu]
		left := h.MiB
		for _, p := range h.Pods {
			ns := c.bookedOn(name, types.UID(p.UID), gpu)
			if ns == "" || left <= 0 {
				continue
			}
			m := min(p.MiB, left)
			left -= m
			u := out[ns]
			u.MemMiB += m
			out[ns] = u
		}
	}
	for id, k := range st.kept {
		uid, ok := lastOn(st, id)
		if !ok || c.liveOn(name, id) {
			continue // a pod booked on it now is charged for it already
		}
		ns := st.past[uid].namespace
		u := out[ns]
		u.MemMiB += k.MemMiB
		u.Cores += k.Cores
		out[ns] = u
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// bookedOn is the namespace of pod uid as the books hold it on node's
// gpu, now or until it ended; "" where they hold none. c.mu held.
func (c *Ledger) bookedOn(node string, uid types.UID, gpu string) string {
	st := c.node(node)
	if p, ok := c.pods[uid]; ok && p.node == node {
		for _, ct := range p.placement {
			for _, s := range ct.GPUs {
				if s.UUID == gpu || (st.mig[s.UUID] != nil && st.mig[s.UUID].GPU == gpu) {
					return p.namespace
				}
			}
		}
	}
	if p, ok := st.past[uid]; ok && slices.Contains(p.devices, gpu) {
		return p.namespace
	}
	return ""
}

// liveOn says whether a pod booked on node now holds instance id. c.mu
// held.
func (c *Ledger) liveOn(node, id string) bool {
	for uid := range c.node(node).pods {
		for _, ct := range c.pods[uid].placement {
			for _, s := range ct.GPUs {
				if s.UUID == id {
					return true
				}
			}
		}
	}
	return false
}

// keptOf is what each instance a node keeps for processes of an ended
// pod is charged, by name: its memory and its share of its GPU's SMs.
func keptOf(inv protocol.Inventory) map[string]podmodel.Usage {
	var out map[string]podmodel.Usage
	for _, g := range inv.MIG {
		for _, in := range g.Kept {
			if out == nil {
				out = map[string]podmodel.Usage{}
			}
			out[in.UUID] = podmodel.Usage{MemMiB: in.MemoryMiB, Cores: g.Cores(in)}
		}
	}
	return out
}

// HeldCharge is what the GPUs hold for namespace beyond its bookings (a
// pod's processes past its slice or past its end, instances kept for
// them), as charged against its quota: part of NamespaceUsage.
func (c *Ledger) HeldCharge(namespace string) podmodel.Usage {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var total podmodel.Usage
	for node := range c.charging {
		total = total.Plus(c.nodes[node].charges[namespace])
	}
	return total
}
