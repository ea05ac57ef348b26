package fit

import "github.com/vgpud/vgpud/protocol/podmodel"

// What follows places a container on a MIG instance: held whole, the
// smallest that holds what it asks.

// instanceFits says whether container c fits MIG instance g (n.GPUs[idx]), with the
// pod's earlier containers' peak pk on it, and counts why not in rej.
// Memory asked as a share counts against the parent GPU, as cores do:
// the instance's Cores are its share of the parent's SMs.
func instanceFits(c *podmodel.ContainerRequest, idx int, gpus []CommittedGPU, pk []podmodel.Peak, opts Options, rej *rejections) (candidate, bool) {
	g := &gpus[idx]
	wantMem := memFor(c, g.MIG.GPUMemoryMiB, opts)
	if c.MIGProfile != "" {
		wantMem = 0 // the profile says it all
	}
	switch {
	case c.MIGProfile != "" && c.MIGProfile != g.MIG.Profile:
		rej.profile++
	case !g.Used.Idle() || !peakAt(pk, idx).Total().Idle():
		rej.exclusive++
	case g.Blocked || ownOverlap(gpus, idx, pk):
		// Possible, not makeable now: say so where it would hold the
		// container; a smaller one is just not free.
		if wantMem <= g.MemoryMiB && c.Cores <= g.GPU.Cores {
			rej.blocked++
		} else {
			rej.exclusive++
		}
	case wantMem > g.MemoryMiB:
		rej.mem++
		rej.wantMem = wantMem
		rej.largestFreeMem = max(rej.largestFreeMem, g.MemoryMiB)
	case c.Cores > g.GPU.Cores:
		rej.cores++
		rej.wantCores = c.Cores
		rej.largestFreeCores = max(rej.largestFreeCores, g.GPU.Cores)
	default:
		u := podmodel.Usage{MemMiB: g.MemoryMiB, Cores: g.GPU.Cores, Slots: 1}
		return candidate{idx: idx, usage: u, load: 1, numa: g.NUMA}, true
	}
	return candidate{}, false
}

// ownOverlap says whether the pod's earlier containers (pk) took a
// possible instance that overlaps gpus[idx], itself possible.
func ownOverlap(gpus []CommittedGPU, idx int, pk []podmodel.Peak) bool {
	r := gpus[idx].MIG
	if pk == nil || !r.OnDemand {
		return false
	}
	for j := range gpus {
		if o := gpus[j].MIG; j != idx && o != nil && o.OnDemand && !pk[j].Total().Idle() && r.Overlaps(o) {
			return true
		}
	}
	return false
}

// smallest keeps the smallest MIG instance among cands (least memory,
// then fewest SMs): one that asks MIG wastes the least. Among equals, an
// instance there already, or else the possible instance whose making
// blocks the fewest others still free on its GPU (a 1g at the end of
// the memory slots leaves a 3g or a 7g room), then the lowest index.
func smallest(cands []candidate, gpus []CommittedGPU) []candidate {
	best, bestCost := -1, 0
	for i, k := range cands {
		// An instance's usage is the whole instance (instanceFits).
		switch {
		case best < 0, k.usage.MemMiB < cands[best].usage.MemMiB,
			k.usage.MemMiB == cands[best].usage.MemMiB && k.usage.Cores < cands[best].usage.Cores:
			best, bestCost = i, blocks(gpus, k.idx)
		case k.usage.MemMiB == cands[best].usage.MemMiB && k.usage.Cores == cands[best].usage.Cores:
			if c := blocks(gpus, k.idx); c < bestCost {
				best, bestCost = i, c
			}
		}
	}
	if best < 0 {
		return cands
	}
	return cands[best : best+1]
}

// blocks is how many possible instances, free now, making gpus[idx]
// would block: 0 for an instance that exists.
func blocks(gpus []CommittedGPU, idx int) int {
	r := gpus[idx].MIG
	if r == nil || !r.OnDemand || r.Made {
		return 0
	}
	n := 0
	for j := range gpus {
		o := gpus[j].MIG
		if j != idx && o != nil && o.OnDemand && !gpus[j].Blocked && gpus[j].Used.Idle() && r.Overlaps(o) {
			n++
		}
	}
	return n
}

// hasMIG reports whether some GPU of n is a MIG instance.
func (n *Node) hasMIG() bool {
	for i := range n.GPUs {
		if n.GPUs[i].MIG != nil {
			return true
		}
	}
	return false
}
