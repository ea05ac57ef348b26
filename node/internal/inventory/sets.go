package inventory

import (
	"cmp"
	"math/bits"
	"slices"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/protocol"
)

// maxSets is the most sets an inventory carries (protocol's bound); real
// machines have a handful.
const maxSets = 256

// Sets works out the node's connected GPU sets once, so that placement
// only looks them up: the largest groups every two of which are joined by
// NVLink, then those behind one PCIe switch. Each is a maximal clique of
// its link (Bron–Kerbosch over bitmasks): an NVSwitch machine gives one
// set of all its GPUs, NVLink bridges give pairs, a hybrid cube mesh its
// overlapping fours. Closest link first, larger sets first, then by
// lowest index.
func Sets(devs []gpu.Device) []protocol.GPUSet {
	if len(devs) > 64 {
		return nil // beyond one bitmask; no such node exists today
	}
	pos := map[int]int{} // index -> position
	for i, d := range devs {
		pos[d.Index] = i
	}
	var out []protocol.GPUSet
	for _, link := range []string{protocol.LinkNVLink, protocol.LinkPCIeSwitch} {
		adj := make([]uint64, len(devs))
		for i, d := range devs {
			peers := d.NVLink
			if link == protocol.LinkPCIeSwitch {
				peers = d.PCIeSwitch
			}
			for _, p := range peers {
				if j, ok := pos[p]; ok && j != i {
					adj[i] |= 1 << j
					adj[j] |= 1 << i
				}
			}
		}
		var found []protocol.GPUSet
		cliques(adj, 0, all(len(devs)), 0, func(r uint64) bool {
			if bits.OnesCount64(r) < 2 {
				return true
			}
			s := protocol.GPUSet{Link: link}
			for j := range devs {
				if r&(1<<j) != 0 {
					s.GPUs = append(s.GPUs, devs[j].Index)
				}
			}
			found = append(found, s)
			// A graph NVML would never report can have millions of
			// maximal cliques: stop at the most an inventory carries.
			return len(found) < maxSets
		})
		slices.SortFunc(found, func(a, b protocol.GPUSet) int {
			return cmp.Or(cmp.Compare(len(b.GPUs), len(a.GPUs)), slices.Compare(a.GPUs, b.GPUs))
		})
		out = append(out, found...)
	}
	if len(out) > maxSets {
		out = out[:maxSets]
	}
	return out
}

func all(n int) uint64 {
	if n == 64 {
		return ^uint64(0)
	}
	return 1<<n - 1
}

// cliques reports every maximal clique of adj that extends r from the
// candidates p, excluding x (Bron–Kerbosch with a pivot), until report
// says to stop; it returns false once stopped.
func cliques(adj []uint64, r, p, x uint64, report func(uint64) bool) bool {
	if p == 0 && x == 0 {
		return report(r)
	}
	pivot := bits.TrailingZeros64(p | x)
	for cand := p &^ adj[pivot]; cand != 0; cand &= cand - 1 {
		v := bits.TrailingZeros64(cand)
		if !cliques(adj, r|1<<v, p&adj[v], x&adj[v], report) {
			return false
		}
		p &^= 1 << v
		x |= 1 << v
	}
	return true
}
