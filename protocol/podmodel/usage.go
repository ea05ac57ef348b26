package podmodel

import "github.com/vgpud/vgpud/protocol"

// What a pod holds is one rule, used by the books, by quota, by the
// webhook and by `vgpud inspect`:
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

// Usage is what is held of one GPU (or, for quota, of all of a pod's GPUs
// together).
type Usage struct {
	MemMiB    int64
	Cores     int
	Slots     int
	Exclusive bool // nobody joins: a 100-core container holds it, or a mutex one
	// Mutex: held alone by the mutex policy (GPUSlice.Exclusive), though
	// what is held may be less than the GPU; quota charges it all.
	Mutex bool
}

// Exclusive reports whether a container asking cores percent of each of
// its GPUs holds them whole: every core, so nobody joins it. Placement,
// the books and quota all read it so.
func Exclusive(cores int) bool { return cores >= 100 }

// Plus is u and o held together.
func (u Usage) Plus(o Usage) Usage {
	return Usage{MemMiB: u.MemMiB + o.MemMiB, Cores: u.Cores + o.Cores, Slots: u.Slots + o.Slots, Exclusive: u.Exclusive || o.Exclusive, Mutex: u.Mutex || o.Mutex}
}

// Max is the larger of u and o, dimension by dimension.
func (u Usage) Max(o Usage) Usage {
	u.MemMiB = max(u.MemMiB, o.MemMiB)
	u.Cores = max(u.Cores, o.Cores)
	u.Slots = max(u.Slots, o.Slots)
	u.Exclusive = u.Exclusive || o.Exclusive
	u.Mutex = u.Mutex || o.Mutex
	return u
}

// Idle reports whether nothing is held.
func (u Usage) Idle() bool { return u.MemMiB == 0 && u.Cores == 0 && u.Slots == 0 }

// Peak accumulates one pod's usage of one GPU (or, for quota, of all its
// GPUs together) container by container. Init containers and sidecars
// must be added in spec order; app containers in any order.
type Peak struct {
	apps     Usage
	sidecars Usage // sidecars added so far
	inits    Usage // the largest init container plus the sidecars before it
}

// Add adds a container of kind k using u.
func (p *Peak) Add(u Usage, k ContainerKind) {
	switch k {
	case KindInit:
		p.inits = p.inits.Max(p.sidecars.Plus(u))
	case KindSidecar:
		p.sidecars = p.sidecars.Plus(u)
	default:
		p.apps = p.apps.Plus(u)
	}
}

// With is the total if a container of kind k using u were added.
func (p Peak) With(u Usage, k ContainerKind) Usage {
	p.Add(u, k)
	return p.Total()
}

// Total is what the pod holds.
func (p Peak) Total() Usage { return p.inits.Max(p.sidecars.Plus(p.apps)) }

// Requested is what a pod's containers ask, summed over their GPUs by the
// rule above: memory and cores per GPU times the GPU count, one slot per
// GPU. Memory given as a percentage counts 0 here, since its size in MiB
// depends on the GPU chosen; a container with every core holds each of
// its GPUs whole, and counts at least wholeGPU MiB of memory for each,
// and one with all of each GPU's memory (a percentage of 100) every core
// (bind charges the chosen GPU's whole memory, Placement.Charge; before
// the GPU is chosen the caller may know the least it can be, or pass 0).
// With mutex (the pod's GPU policy) the pod holds its GPUs alone, each
// charged whole (Placement.Charge): before they are chosen, the least
// that can be is as many GPUs as its largest container asks, since its
// containers may share them.
func Requested(cs []ContainerRequest, wholeGPU int64, mutex bool) Usage {
	var p Peak
	most := 0 // GPUs of the pod's largest container
	for _, c := range cs {
		n := int64(c.GPUs)
		most = max(most, c.GPUs)
		u := Usage{MemMiB: c.MemoryMiB * n, Cores: c.Cores * c.GPUs, Slots: c.GPUs}
		switch {
		case c.GPUs == 0:
		case Exclusive(c.Cores):
			u.MemMiB = max(c.MemoryMiB, wholeGPU) * n
			u.Exclusive = true
		case c.MemoryPercent >= protocol.MaxPercent:
			// All of each GPU's memory denies others the GPU as every
			// core does: charged every core too (Placement.Charge).
			u.MemMiB = wholeGPU * n
			u.Cores = protocol.MaxPercent * c.GPUs
		}
		p.Add(u, c.Kind)
	}
	t := p.Total()
	if mutex && most > 0 {
		t.MemMiB = max(t.MemMiB, wholeGPU*int64(most))
		t.Cores = max(t.Cores, protocol.MaxPercent*most)
		t.Exclusive, t.Mutex = true, true
	}
	return t
}
