package dra

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/vgpud/vgpud/protocol"
)

// testInventory is a node's: two shared GPUs (one unhealthy, core
// scaling 2 on it) and a GPU in MIG mode with two instances.
func testInventory() protocol.Inventory {
	return protocol.Inventory{
		GPUs: []protocol.GPU{
			{UUID: "GPU-a", Index: 0, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, Cores: 100, Split: 4, NUMA: 1, Healthy: true},
			{UUID: "GPU-b", Index: 1, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 61440, Cores: 200, Split: 10, Healthy: false},
		},
		MIG: []protocol.MIGGPU{{UUID: "GPU-m", Index: 2, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, SMs: 98, Healthy: true, Instances: []protocol.MIGInstance{
			{UUID: "MIG-1", Profile: "3g.20gb", MemoryMiB: 20096, SMs: 42, Start: 4, Size: 4},
			{UUID: "MIG-2", Profile: "1g.5gb", MemoryMiB: 4864, SMs: 14, Start: 0, Size: 1},
		}}},
	}
}

// A pool is one or more slices of at most 64 devices, and an empty one
// still says the driver runs.
func TestResourcesSlicesThePool(t *testing.T) {
	for _, n := range []int{0, 1, 64, 65, 130} {
		devs := make([]resourceapi.Device, n)
		pool := Resources("n1", devs).Pools["n1"]
		want := max((n+63)/64, 1)
		total := 0
		for _, s := range pool.Slices {
			total += len(s.Devices)
			if len(s.Devices) > 64 {
				t.Errorf("%d devices: a slice of %d", n, len(s.Devices))
			}
		}
		if len(pool.Slices) != want || total != n {
			t.Errorf("%d devices: %d slices holding %d; want %d", n, len(pool.Slices), total, want)
		}
	}
}
