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
		t := peaks[i].Total()
		n.GPUs[i].Used = n.GPUs[i].Used.Plus(t)
		if !t.Idle() && n.GPUs[i].MIG != nil && n.GPUs[i].MIG.OnDemand {
			n.block(i)
		}
	}
}

// BlockMade blocks, on n fresh from its inventory, every possible MIG
// instance that overlaps one the node has made: that placement is
// taken until the node destroys what it made.
func BlockMade(n *Node) {
	for i := range n.GPUs {
		if r := n.GPUs[i].MIG; r != nil && r.Made {
			n.block(i)
		}
	}
}

// block marks the possible instances that overlap n.GPUs[i] on its GPU.
func (n *Node) block(i int) {
	r := n.GPUs[i].MIG
	for j := range n.GPUs {
		if o := n.GPUs[j].MIG; j != i && o != nil && o.OnDemand && r.Overlaps(o) {
			n.GPUs[j].Blocked = true
		}
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
