package books

import (
	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/protocol"
)

// bookable is every GPU of inv the books hold (Inventory.Bookable), with
// what fit needs of a MIG instance's parent, by instance UUID, and each
// instance's parent UUID.
func bookable(inv protocol.Inventory) ([]protocol.GPU, map[string]*fit.MIGParent, map[string]string) {
	gpus, parents := inv.Bookable()
	if parents == nil {
		return gpus, nil, nil
	}
	mig := make(map[string]*fit.MIGParent, len(parents))
	for _, m := range inv.MIG {
		for _, in := range m.Instances {
			mig[in.UUID] = &fit.MIGParent{UUID: m.UUID, MemoryMiB: m.MemoryMiB, Profile: in.Profile}
		}
	}
	return gpus, mig, parents
}

// onParent is the slices s stands for when HAMi's record names a GPU in
// MIG mode (HAMi writes the parent's UUID, with the instance in brackets
// that its decoder drops): every instance of it, whole, erring towards
// booking more. nil when s names no such GPU.
func onParent(s protocol.GPUSlice, gpus []protocol.GPU, parents map[string]string) []protocol.GPUSlice {
	var out []protocol.GPUSlice
	for _, g := range gpus {
		if p, ok := parents[g.UUID]; ok && p == s.UUID {
			out = append(out, protocol.GPUSlice{UUID: g.UUID, MemoryMiB: g.MemoryMiB, Cores: g.Cores, MIG: true})
		}
	}
	return out
}
