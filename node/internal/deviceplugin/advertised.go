package deviceplugin

import (
	"slices"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/protocol"
)

// Advertised is what the device plugin offers: each shared GPU with the
// memory inv advertises for it (scaling applied), which bounds every
// slice of it, and each MIG instance whole; and the physical GPUs' UUIDs,
// which health watches.
func Advertised(devs []gpu.Device, inv protocol.Inventory) ([]AdvertisedGPU, []string) {
	mem := make(map[string]int64, len(inv.GPUs))
	for _, g := range inv.GPUs {
		mem[g.UUID] = g.MemoryMiB
	}
	gpus := make([]AdvertisedGPU, 0, len(devs))
	uuids := make([]string, 0, len(devs))
	for _, d := range devs {
		uuids = append(uuids, d.UUID)
		if d.MIG == nil {
			gpus = append(gpus, AdvertisedGPU{UUID: d.UUID, NUMA: d.NUMA, MemoryMiB: mem[d.UUID]})
		}
	}
	// A MIG GPU's instances as the inventory lists them: those the node
	// made on demand under their possible names, with those it may make,
	// so that kubelet counts a device for each and Allocate finds it.
	for _, g := range inv.MIG {
		for _, in := range append(slices.Clip(g.Instances), g.Possible...) {
			gpus = append(gpus, AdvertisedGPU{UUID: in.UUID, NUMA: g.NUMA, MemoryMiB: in.MemoryMiB, Parent: g.UUID, Profile: in.Profile})
		}
	}
	return gpus, uuids
}
