package books

import "github.com/vgpud/vgpud/protocol"

// onParent is the slices s stands for when HAMi's record names a GPU in
// MIG mode (HAMi writes the parent's UUID, with the instance in brackets
// that its decoder drops): every instance of it, whole, erring towards
// booking more. nil when s names no such GPU.
func onParent(s protocol.GPUSlice, gpus []protocol.GPU, mig map[string]*protocol.MIGRef) []protocol.GPUSlice {
	var out []protocol.GPUSlice
	for _, g := range gpus {
		if r := mig[g.UUID]; r != nil && r.GPU == s.UUID {
			out = append(out, protocol.GPUSlice{UUID: g.UUID, MemoryMiB: g.MemoryMiB, Cores: g.Cores, MIG: true})
		}
	}
	return out
}
