package podmodel

import (
	"slices"

	"github.com/vgpud/vgpud/protocol"
)

// ContainerPlacement is the GPUs one container gets.
type ContainerPlacement struct {
	Name string
	Kind ContainerKind
	GPUs []protocol.GPUSlice
}

// Placement is a pod's GPUs, container by container in kubelet's order
// (init containers first).
type Placement []ContainerPlacement

// Assignment renders p as the vgpud.io/assignment value for node.
func (p Placement) Assignment(node string) protocol.Assignment {
	a := protocol.Assignment{Version: protocol.Version, Node: node}
	for _, c := range p {
		a.Containers = append(a.Containers, protocol.ContainerAssignment{Name: c.Name, GPUs: c.GPUs})
	}
	return a
}

// PlacementOf reads an assignment back into a placement, taking each
// container's kind from kinds (see Kinds); containers the pod does not
// have count as app containers, the safe side.
func PlacementOf(a protocol.Assignment, kinds map[string]ContainerKind) Placement {
	pl := make(Placement, 0, len(a.Containers))
	for _, c := range a.Containers {
		pl = append(pl, ContainerPlacement{Name: c.Name, Kind: kinds[c.Name], GPUs: c.GPUs})
	}
	return pl
}

// HoldsGPU reports whether some container of p has a slice: kubelet
// calls Allocate only for a container that asks for GPUs, so a placement
// without one is never allocated and must hold no node's in-flight slot.
func (p Placement) HoldsGPU() bool {
	for _, c := range p {
		if len(c.GPUs) > 0 {
			return true
		}
	}
	return false
}

// SliceUsage is what one container's slice of a GPU uses.
func SliceUsage(s protocol.GPUSlice) Usage {
	return Usage{MemMiB: s.MemoryMiB, Cores: s.Cores, Slots: 1, Exclusive: Exclusive(s.Cores) || s.Exclusive, Mutex: s.Exclusive}
}

// AddPeaks adds each slice of p to the peak of its GPU: peaks[at(uuid)].
// Slices on GPUs at does not know (-1) are ignored: the inventory changed
// under the pod, and the books report that separately. It allocates
// nothing, since the books recount a node this way on every booking.
func (p Placement) AddPeaks(peaks []Peak, at func(uuid string) int) {
	for _, c := range p {
		for _, s := range c.GPUs {
			if i := at(s.UUID); i >= 0 {
				peaks[i].Add(SliceUsage(s), c.Kind)
			}
		}
	}
}

// Footprint is what p holds on each of the GPUs named by uuids,
// index-aligned with it.
func (p Placement) Footprint(uuids []string) []Usage {
	peaks := make([]Peak, len(uuids))
	p.AddPeaks(peaks, func(uuid string) int { return slices.Index(uuids, uuid) })
	out := make([]Usage, len(uuids))
	for i := range out {
		out[i] = peaks[i].Total()
	}
	return out
}

// Charge is what p counts against quota: on each GPU, what p holds
// there, but never less than what that denies others. A GPU held
// whole (a slice with every core or all its memory, or held alone by
// the mutex policy: nobody joins it) counts its whole memory and every
// core; any other counts at least a slot's share of it per slot
// taken (SlotShare), so one 1 MiB pod on every GPU is charged a tenth of
// each at split 10, not 1 MiB. gpuOf returns false for a GPU it does not
// know, which is charged what p names. The sum's Exclusive says some GPU
// is held whole.
func (p Placement) Charge(gpuOf func(uuid string) (protocol.GPU, bool)) Usage {
	uuids := p.uuids()
	var total Usage
	for i, u := range p.Footprint(uuids) {
		total = total.Plus(chargeOn(u, gpuOf, uuids[i])) // Exclusive: some GPU is held whole
	}
	return total
}

// chargeOn is what holding u of the GPU uuid is charged.
func chargeOn(u Usage, gpuOf func(uuid string) (protocol.GPU, bool), uuid string) Usage {
	g, ok := gpuOf(uuid)
	if !ok {
		return u
	}
	// A slice of every core, of all the memory, or held alone by the
	// mutex policy denies others the whole GPU: it is charged all of it
	// in both, whatever else it names. One GPU's cores are 100 whatever
	// the node's core scaling; a MIG instance's are its share of SMs.
	if u.Exclusive || (g.MemoryMiB > 0 && u.MemMiB >= g.MemoryMiB) {
		u.MemMiB = max(u.MemMiB, g.MemoryMiB)
		u.Cores = max(u.Cores, min(max(g.Cores, 1), protocol.MaxPercent))
		return u
	}
	s := SlotShare(g)
	u.MemMiB = max(u.MemMiB, s.MemMiB*int64(u.Slots))
	u.Cores = max(u.Cores, s.Cores*u.Slots)
	return u
}

// SlotShare is one slot of g: its memory and cores divided by its split.
// It is the least a slice of g is charged, and the cores a container
// that names none gets there by default: what it denies others, so the
// split-th such slice still fits. Cores are a percentage of the GPU, at
// least 1 (0 would read as unlimited) and at most 100.
func SlotShare(g protocol.GPU) Usage {
	split := max(g.Split, 1)
	return Usage{
		MemMiB: g.MemoryMiB / int64(split),
		Cores:  min(max(g.Cores/split, 1), protocol.MaxPercent),
		Slots:  1,
	}
}

// uuids are the GPUs p names, each once.
func (p Placement) uuids() []string {
	var uuids []string
	for _, c := range p {
		for _, s := range c.GPUs {
			if !slices.Contains(uuids, s.UUID) {
				uuids = append(uuids, s.UUID)
			}
		}
	}
	return uuids
}
