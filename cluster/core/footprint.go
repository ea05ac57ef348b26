package core

// The pod's footprint on each GPU is its peak: init containers run one at
// a time before the app containers, so a GPU carries the larger of any
// single init container and the sum of the app containers — dimension by
// dimension (memory, cores, slots).

func (u Usage) plus(o Usage) Usage {
	return Usage{MemMiB: u.MemMiB + o.MemMiB, Cores: u.Cores + o.Cores, Slots: u.Slots + o.Slots, Exclusive: u.Exclusive || o.Exclusive}
}

func (u Usage) minus(o Usage) Usage {
	return Usage{MemMiB: u.MemMiB - o.MemMiB, Cores: u.Cores - o.Cores, Slots: u.Slots - o.Slots, Exclusive: u.Exclusive && !o.Exclusive}
}

func (u Usage) max(o Usage) Usage {
	if o.MemMiB > u.MemMiB {
		u.MemMiB = o.MemMiB
	}
	if o.Cores > u.Cores {
		u.Cores = o.Cores
	}
	if o.Slots > u.Slots {
		u.Slots = o.Slots
	}
	u.Exclusive = u.Exclusive || o.Exclusive
	return u
}

// peak tracks a pod's usage per GPU (index-aligned with Node.GPUs) while
// its containers are placed.
type peak struct {
	apps  []Usage
	inits []Usage
}

func newPeak(n int) peak {
	both := make([]Usage, 2*n) // one allocation: fit runs per node per filter
	return peak{apps: both[:n:n], inits: both[n:]}
}

func (p peak) at(i int) Usage { return p.apps[i].max(p.inits[i]) }

// with is the footprint on GPU i if a container using u were added.
func (p peak) with(i int, u Usage, init bool) Usage {
	if init {
		return p.apps[i].max(p.inits[i].max(u))
	}
	return p.apps[i].plus(u).max(p.inits[i])
}

func (p peak) add(i int, u Usage, init bool) {
	if init {
		p.inits[i] = p.inits[i].max(u)
		return
	}
	p.apps[i] = p.apps[i].plus(u)
}

// Footprint is what a placement commits on each GPU of n, index-aligned
// with n.GPUs. Slices on GPUs n does not have are ignored: the inventory
// changed under the pod, and the cache reports that separately.
func Footprint(n Node, p Placement) []Usage {
	idx := make(map[string]int, len(n.GPUs))
	for i, g := range n.GPUs {
		idx[g.UUID] = i
	}
	pk := newPeak(len(n.GPUs))
	for _, c := range p {
		for _, s := range c.GPUs {
			i, ok := idx[s.UUID]
			if !ok {
				continue
			}
			pk.add(i, Usage{MemMiB: s.MemoryMiB, Cores: s.Cores, Slots: 1, Exclusive: s.Cores >= 100}, c.Init)
		}
	}
	out := make([]Usage, len(n.GPUs))
	for i := range out {
		out[i] = pk.at(i)
	}
	return out
}

// Apply commits a footprint on n.
func Apply(n *Node, fp []Usage) {
	for i := range n.GPUs {
		if i < len(fp) {
			n.GPUs[i].Used = n.GPUs[i].Used.plus(fp[i])
		}
	}
}

// Release undoes Apply.
func Release(n *Node, fp []Usage) {
	for i := range n.GPUs {
		if i < len(fp) {
			n.GPUs[i].Used = n.GPUs[i].Used.minus(fp[i])
		}
	}
}
