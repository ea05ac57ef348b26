package books

import (
	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/protocol"
)

// bookable is every GPU of inv the books hold: the shared GPUs, then each
// MIG instance as a GPU of its own (its memory, its share of the parent's
// SMs as cores, split 1, the parent's index, NUMA node and health), with
// what fit needs of its parent by instance UUID.
func bookable(inv protocol.Inventory) ([]protocol.GPU, map[string]*fit.MIGParent) {
	if len(inv.MIG) == 0 {
		return inv.GPUs, nil
	}
	gpus := make([]protocol.GPU, len(inv.GPUs), len(inv.GPUs)+8*len(inv.MIG))
	copy(gpus, inv.GPUs)
	parents := map[string]*fit.MIGParent{}
	for _, m := range inv.MIG {
		for _, in := range m.Instances {
			gpus = append(gpus, protocol.GPU{UUID: in.UUID, Index: m.Index, Model: m.Model + " MIG " + in.Profile, MemoryMiB: in.MemoryMiB,
				Cores: m.Cores(in), Split: 1, NUMA: m.NUMA, Healthy: m.Healthy})
			parents[in.UUID] = &fit.MIGParent{UUID: m.UUID, MemoryMiB: m.MemoryMiB, Profile: in.Profile}
		}
	}
	return gpus, parents
}
