package dradevices

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// Slice is what allocation result r takes of g, a GPU or a MIG instance
// (mig), as a container's slice would: a share its consumed memory and
// cores; an instance all of it, as the extender books one (its share of
// the parent's cores); a GPU held whole all of it.
func Slice(g protocol.GPU, mig bool, r resourceapi.DeviceRequestAllocationResult) protocol.GPUSlice {
	if mig {
		return protocol.GPUSlice{UUID: g.UUID, MemoryMiB: g.MemoryMiB, Cores: g.Cores, MIG: true}
	}
	if mem, cores, ok := Consumed(r); ok {
		return protocol.GPUSlice{UUID: g.UUID, MemoryMiB: mem, Cores: cores}
	}
	return protocol.GPUSlice{UUID: g.UUID, MemoryMiB: g.MemoryMiB, Cores: protocol.MaxPercent}
}

// Charge is what quota charges for the devices of vgpud's that results
// hold, as bind charges a pod's placement (podmodel.Placement.Charge: at
// least a slot's share of each GPU, one held whole all of it); device
// finds a result's GPU by its pool (the node) and name. A device it
// does not find (gone from its node's inventory) is charged what it
// consumed, and a slot. ok is false where results hold none of vgpud's.
func Charge(results []resourceapi.DeviceRequestAllocationResult, device func(pool, name string) (g protocol.GPU, mig, ok bool)) (u podmodel.Usage, ok bool) {
	var held podmodel.ContainerPlacement
	known := map[string]protocol.GPU{}
	for _, r := range results {
		if r.Driver != DriverName {
			continue
		}
		ok = true
		g, mig, found := device(r.Pool, r.Device)
		if !found {
			mem, cores, _ := Consumed(r)
			u = u.Plus(podmodel.Usage{MemMiB: mem, Cores: cores, Slots: 1})
			continue
		}
		held.GPUs = append(held.GPUs, Slice(g, mig, r))
		known[g.UUID] = g
	}
	if len(held.GPUs) > 0 {
		u = u.Plus(podmodel.Placement{held}.Charge(func(uuid string) (protocol.GPU, bool) {
			g, ok := known[uuid]
			return g, ok
		}))
	}
	return u, ok
}
