package core

import (
	"slices"

	"github.com/vgpud/vgpud/protocol"
)

// What a pod holds is one rule, used by the books, by quota and by
// `vgpud inspect`:
//
//   - app containers run together for the pod's life: they are summed;
//   - sidecars (init containers with restartPolicy Always) start in init
//     order and then run for the pod's life: summed with the apps;
//   - an init container runs alone beside the sidecars started before it,
//     and exits before the apps start: it counts at its peak.
//
// So a pod holds max(max over init i of (sidecars before i + init i),
// all sidecars + all apps), dimension by dimension — the rule Kubernetes
// itself uses for a pod's effective requests.

func (u Usage) plus(o Usage) Usage {
	return Usage{MemMiB: u.MemMiB + o.MemMiB, Cores: u.Cores + o.Cores, Slots: u.Slots + o.Slots, Exclusive: u.Exclusive || o.Exclusive}
}

func (u Usage) max(o Usage) Usage {
	u.MemMiB = max(u.MemMiB, o.MemMiB)
	u.Cores = max(u.Cores, o.Cores)
	u.Slots = max(u.Slots, o.Slots)
	u.Exclusive = u.Exclusive || o.Exclusive
	return u
}

// Peak accumulates one pod's usage of one GPU (or, for quota, of all its
// GPUs together) container by container. Init containers and sidecars
// must be added in spec order; app containers in any order.
type Peak struct {
	apps     Usage
	sidecars Usage // sidecars added so far
	inits    Usage // the largest init container plus the sidecars before it
}

// Add adds a container of kind k using u.
func (p *Peak) Add(u Usage, k protocol.ContainerKind) {
	switch k {
	case protocol.KindInit:
		p.inits = p.inits.max(p.sidecars.plus(u))
	case protocol.KindSidecar:
		p.sidecars = p.sidecars.plus(u)
	default:
		p.apps = p.apps.plus(u)
	}
}

// With is the total if a container of kind k using u were added.
func (p Peak) With(u Usage, k protocol.ContainerKind) Usage {
	p.Add(u, k)
	return p.Total()
}

// Total is what the pod holds.
func (p Peak) Total() Usage { return p.inits.max(p.sidecars.plus(p.apps)) }

// Requested is what a pod's containers ask, summed over their GPUs by the
// rule above: memory and cores per GPU times the GPU count, one slot per
// GPU. Memory given as a percentage counts 0 here, since its size in MiB
// depends on the GPU chosen.
func Requested(cs []protocol.ContainerRequest) Usage {
	var p Peak
	for _, c := range cs {
		n := int64(c.GPUs)
		p.Add(Usage{MemMiB: c.MemoryMiB * n, Cores: c.Cores * c.GPUs, Slots: c.GPUs}, c.Kind)
	}
	return p.Total()
}

// PlacementOf reads an assignment back into a placement, taking each
// container's kind from kinds (see protocol.Kinds); containers the pod
// does not have count as app containers, the safe side.
func PlacementOf(a protocol.Assignment, kinds map[string]protocol.ContainerKind) Placement {
	pl := make(Placement, 0, len(a.Containers))
	for _, c := range a.Containers {
		pl = append(pl, ContainerPlacement{Name: c.Name, Kind: kinds[c.Name], GPUs: c.GPUs})
	}
	return pl
}

// Footprint is what a placement holds on each GPU of n, index-aligned with
// n.GPUs. The placement is in kubelet's order (init containers first), as
// Fit returns it and the assignment stores it. Slices on GPUs n does not
// have are ignored: the inventory changed under the pod, and the cache
// reports that separately.
func Footprint(n Node, p Placement) []Usage {
	peaks := make([]Peak, len(n.GPUs))
	addPeaks(n, p, peaks)
	out := make([]Usage, len(n.GPUs))
	for i := range out {
		out[i] = peaks[i].Total()
	}
	return out
}

// sliceUsage is what one container's slice of a GPU uses.
func sliceUsage(s protocol.GPUSlice) Usage {
	return Usage{MemMiB: s.MemoryMiB, Cores: s.Cores, Slots: 1, Exclusive: s.Cores >= 100}
}

// index is the position of the GPU with uuid in n.GPUs, or -1.
func (n Node) index(uuid string) int {
	for i := range n.GPUs {
		if n.GPUs[i].UUID == uuid {
			return i
		}
	}
	return -1
}

// Add commits placement p on n: Apply(n, Footprint(n, p)) without the
// allocations for nodes of up to 16 GPUs, since the books recount a node
// this way on every booking there.
func Add(n *Node, p Placement) {
	var buf [16]Peak
	peaks := buf[:]
	if len(n.GPUs) > len(buf) {
		peaks = make([]Peak, len(n.GPUs))
	}
	peaks = peaks[:len(n.GPUs)]
	addPeaks(*n, p, peaks)
	for i := range n.GPUs {
		n.GPUs[i].Used = n.GPUs[i].Used.plus(peaks[i].Total())
	}
}

// addPeaks adds each slice of p to the peak of its GPU, index-aligned with
// n.GPUs; slices on GPUs n does not have are ignored.
func addPeaks(n Node, p Placement, peaks []Peak) {
	for _, c := range p {
		for _, s := range c.GPUs {
			if i := n.index(s.UUID); i >= 0 {
				peaks[i].Add(sliceUsage(s), c.Kind)
			}
		}
	}
}

// Apply commits a footprint on n.
func Apply(n *Node, fp []Usage) {
	for i := range n.GPUs {
		if i < len(fp) {
			n.GPUs[i].Used = n.GPUs[i].Used.plus(fp[i])
		}
	}
}

// PlacementTotal is what a placement holds summed over its GPUs, each GPU
// at its own peak: what quota counts once the GPUs are chosen, so memory
// given as a percentage or the whole card counts in MiB.
func PlacementTotal(p Placement) Usage {
	var uuids []string
	for _, c := range p {
		for _, s := range c.GPUs {
			if !slices.Contains(uuids, s.UUID) {
				uuids = append(uuids, s.UUID)
			}
		}
	}
	n := Node{GPUs: make([]GPU, len(uuids))}
	for i, u := range uuids {
		n.GPUs[i].UUID = u
	}
	var total Usage
	for _, u := range Footprint(n, p) {
		total = total.plus(u)
	}
	total.Exclusive = false // a sum over GPUs holds no one GPU
	return total
}
