package gpuuse

import (
	"maps"
	"slices"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/inspectv1"
)

// usageValue is what the node publishes of a usage snapshot (Taken left
// out, so that two samples that differ only in time encode the same),
// and its encoding. Memory is rounded to 64 MiB and SM time to 5 %, so
// that noise is no change; the biggest users come first, and what does
// not fit protocol's bounds is counted in Omitted, not shown.
func usageValue(s *inspectv1.GPUUse) (protocol.NodeUsage, string, error) {
	u := protocol.NodeUsage{Mode: s.Mode, Containers: []protocol.ContainerUsage{}}
	for _, c := range s.Containers {
		sm := c.SMPercent
		if sm > 0 {
			sm = (sm + 2) / 5 * 5
		}
		u.Containers = append(u.Containers, protocol.ContainerUsage{Namespace: c.Namespace, Pod: c.Pod, Container: c.Container, GPU: c.GPU,
			UsedMiB: (int64(c.UsedMiB) + 32) / 64 * 64, SliceMiB: int64(c.SliceMiB), SMPercent: sm, Cores: c.Cores, Kills: c.Kills, Over: c.Over,
			Claim: c.Claim, SharedMiB: (int64(c.SharedMiB) + 32) / 64 * 64})
	}
	slices.SortStableFunc(u.Containers, func(x, y protocol.ContainerUsage) int { return int(y.UsedMiB - x.UsedMiB) })
	if n := len(u.Containers) - protocol.MaxUsageContainers; n > 0 {
		u.Containers, u.Omitted = u.Containers[:protocol.MaxUsageContainers], n
	}
	held := map[string]int64{}
	for _, p := range s.Unattributed {
		held[p.GPU] += int64(p.UsedMiB)
	}
	for _, g := range slices.Sorted(maps.Keys(held)) {
		u.Unattributed = append(u.Unattributed, protocol.GPUMemory{GPU: g, UsedMiB: held[g] / 64 * 64})
	}
	// Rounded up: the leader counts it as used, so the rounding errs on
	// the side of placing less.
	for _, g := range s.GPUs {
		h := protocol.GPUHeld{GPU: g.GPU, MiB: (int64(g.HeldMiB) + 63) / 64 * 64, Full: g.Full}
		// The largest first (inspect's order), each rounded up too, none
		// above the GPU's figure; the smallest past the bound are
		// charged to no pod.
		for _, p := range g.Pods[:min(len(g.Pods), protocol.MaxHeldPods)] {
			h.Pods = append(h.Pods, protocol.HeldPod{UID: p.UID, MiB: min((int64(p.MiB)+63)/64*64, h.MiB)})
		}
		u.Held = append(u.Held, h)
	}
	enc, err := protocol.EncodeUsage(u)
	// Long names can pass the byte bound before the count bound: drop a
	// quarter of the smallest users at a time, leaving room for Taken.
	for err == nil && len(enc) > protocol.MaxUsageBytes-64 && len(u.Containers) > 0 {
		keep := len(u.Containers) * 3 / 4
		u.Containers, u.Omitted = u.Containers[:keep], u.Omitted+len(u.Containers)-keep
		enc, err = protocol.EncodeUsage(u)
	}
	// Still too long: the pods named for held memory go, a GPU at a
	// time from the last; what they held is then charged to no one.
	for i := len(u.Held) - 1; err == nil && len(enc) > protocol.MaxUsageBytes-64 && i >= 0; i-- {
		u.Held[i].Pods = nil
		enc, err = protocol.EncodeUsage(u)
	}
	return u, enc, err
}
