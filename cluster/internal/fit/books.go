package fit

import "github.com/vgpud/vgpud/protocol/podmodel"

// Add commits placement p on n: each GPU's usage grows by what p holds of
// it (podmodel's footprint rule). Slices on GPUs n does not have are
// ignored: the inventory changed under the pod, and the books report that
// separately. The books recount a node this way on every booking there,
// so for nodes of up to scratchMIG GPUs it allocates nothing.
func Add(n *Node, p podmodel.Placement) {
	var peaks []podmodel.Peak
	switch k := len(n.GPUs); {
	case k <= scratchGPUs:
		var buf [scratchGPUs]podmodel.Peak
		peaks = buf[:k]
	case k <= scratchMIG:
		var buf [scratchMIG]podmodel.Peak
		peaks = buf[:k]
	default:
		peaks = make([]podmodel.Peak, k)
	}
	p.AddPeaks(peaks, n.index)
	for i := range n.GPUs {
		n.GPUs[i].Used = n.GPUs[i].Used.Plus(peaks[i].Total())
	}
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
