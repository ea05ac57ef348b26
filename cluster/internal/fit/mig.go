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
	case !g.Used.Idle() || !peakAt(pk, idx).Total().Idle() || g.Blocked || ownOverlap(gpus, idx, pk):
		rej.exclusive++
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
// then fewest SMs, then lowest index): one that asks MIG wastes the least.
func smallest(cands []candidate) []candidate {
	best := -1
	for i, k := range cands {
		// An instance's usage is the whole instance (instanceFits).
		if best < 0 || k.usage.MemMiB < cands[best].usage.MemMiB || (k.usage.MemMiB == cands[best].usage.MemMiB && k.usage.Cores < cands[best].usage.Cores) {
			best = i
		}
	}
	if best < 0 {
		return cands
	}
	return cands[best : best+1]
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
