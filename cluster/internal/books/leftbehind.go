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
	// onDemand is what it was charged for each instance made for it, by
	// name: what such an instance kept after it is charged.
	onDemand map[string]podmodel.Usage
	// gpuMiB is each shared GPU's memory as the books knew it: the most
	// it is charged for what it left there.
	gpuMiB map[string]int64
	ended  time.Time
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
	p := pastPod{namespace: namespace, ended: c.clock.Now()}
	for _, ct := range pl {
		for _, s := range ct.GPUs {
			p.devices = append(p.devices, s.UUID)
			if i := slices.IndexFunc(st.gpus, func(g protocol.GPU) bool { return g.UUID == s.UUID }); i >= 0 && st.mig[s.UUID] == nil {
				if p.gpuMiB == nil {
					p.gpuMiB = map[string]int64{}
				}
				p.gpuMiB[s.UUID] = st.gpus[i].MemoryMiB
			}
			if ref := st.mig[s.UUID]; ref != nil {
				p.devices = append(p.devices, ref.GPU)
			}
			if protocol.IsOnDemandID(s.UUID) {
				if p.onDemand == nil {
					p.onDemand = map[string]podmodel.Usage{}
				}
				u := podmodel.SliceUsage(s)
				p.onDemand[s.UUID] = podmodel.Usage{MemMiB: u.MemMiB, Cores: u.Cores}
			}
		}
	}
	if len(p.devices) == 0 {
		return
	}
	if st.past == nil {
		st.past = map[types.UID]pastPod{}
	}
	st.past[uid] = p
	c.forget(st, p.ended)
}

// rememberEnded records a terminated pod these books never held (it
// ended before this leader started): where its own assignment, checked
// as any booking is, put it.
func (c *Ledger) rememberEnded(p *slimpod.Pod) {
	if !p.HasAssignment || p.NodeName == "" {
		return
	}
	skip := func() bool {
		_, booked := c.pods[p.UID]
		st := c.nodes[p.NodeName]
		_, known := st.pastOf(p.UID)
		return booked || known || st == nil || len(st.gpus) == 0 // held, remembered, or on no node the books know
	}
	c.mu.RLock()
	done := skip()
	c.mu.RUnlock()
	if done {
		return
	}
	a, err := c.readAssignment(p)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !skip() {
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
	// Named ones are kept whatever their age or number: a node names at
	// most protocol.MaxHeldPods per GPU, and one pod per kept instance.
	named := map[types.UID]bool{}
	for _, h := range st.held {
		for _, p := range h.Pods {
			named[types.UID(p.UID)] = true
		}
	}
	for _, uid := range st.kept {
		named[uid] = true
	}
	var unnamed []types.UID
	for uid, p := range st.past {
		switch {
		case named[uid]:
		case now.Sub(p.ended) > pastKeep:
			delete(st.past, uid)
		default:
			unnamed = append(unnamed, uid)
		}
	}
	if len(unnamed) <= maxPast {
		return
	}
	slices.SortFunc(unnamed, func(a, b types.UID) int { return st.past[a].ended.Compare(st.past[b].ended) })
	for _, uid := range unnamed[:len(unnamed)-maxPast] {
		delete(st.past, uid)
	}
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
		// Never more than the GPU has, whatever a node says it holds.
		i := slices.IndexFunc(st.gpus, func(g protocol.GPU) bool { return g.UUID == gpu })
		left := min(h.MiB, st.gpus[i].MemoryMiB)
		for _, p := range h.Pods {
			ns, covered, most := c.bookedOn(name, types.UID(p.UID), gpu)
			m := min(max(p.MiB-covered, 0), left, most)
			if ns == "" || m <= 0 {
				continue
			}
			left -= m
			u := out[ns]
			u.MemMiB += m
			out[ns] = u
		}
	}
	for id, uid := range st.kept {
		p, ok := st.past[uid]
		if !ok || c.liveOn(name, id) {
			continue // not a pod the books held here; or one booked on it now, charged already
		}
		if u, ok := p.onDemand[id]; ok {
			out[p.namespace] = out[p.namespace].Plus(u)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// bookedOn is the namespace of pod uid as the books hold it on node's
// shared gpu, now or until it ended, "" where they hold none. For a pod
// booked now, covered is what its booking is charged there beyond its
// slices (a slot's share, a GPU held whole), which what it holds past
// its slices uses first; most is what it can hold there beyond its
// charge, so what a node names for it is never charged past the GPU.
// c.mu held.
func (c *Ledger) bookedOn(node string, uid types.UID, gpu string) (namespace string, covered, most int64) {
	if p, ok := c.pods[uid]; ok && p.node == node {
		var on podmodel.Placement
		for _, ct := range p.placement {
			if i := slices.IndexFunc(ct.GPUs, func(s protocol.GPUSlice) bool { return s.UUID == gpu }); i >= 0 {
				on = append(on, podmodel.ContainerPlacement{Name: ct.Name, Kind: ct.Kind, GPUs: ct.GPUs[i : i+1]})
			}
		}
		g, known := c.gpuOf(node)(gpu)
		if len(on) == 0 || !known {
			return "", 0, 0
		}
		charge := on.Charge(c.gpuOf(node)).MemMiB
		return p.namespace, charge - on.Footprint([]string{gpu})[0].MemMiB, max(g.MemoryMiB-charge, 0)
	}
	if p, ok := c.node(node).past[uid]; ok && slices.Contains(p.devices, gpu) {
		return p.namespace, 0, p.gpuMiB[gpu]
	}
	return "", 0, 0
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

// keptOf is, by name, the pod each instance a node keeps for processes
// of an ended pod was made for. What it is charged is the books' own.
func keptOf(inv protocol.Inventory) map[string]types.UID {
	var out map[string]types.UID
	for _, g := range inv.MIG {
		for _, in := range g.Kept {
			if in.Pod == "" {
				continue
			}
			if out == nil {
				out = map[string]types.UID{}
			}
			out[in.UUID] = types.UID(in.Pod)
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
