package podmodel

import (
	"testing"

	"github.com/vgpud/vgpud/protocol"
)

// A slice is charged what it denies others: at least a slot's share of
// its GPU per slot, a GPU held whole all its memory, and what it names
// where that is more. A GPU the charger does not know is charged what
// the slice names.
func TestChargeIsWhatASliceDeniesOthers(t *testing.T) {
	gpus := map[string]protocol.GPU{
		"A": {UUID: "A", MemoryMiB: 40000, Cores: 100, Split: 10},
		"B": {UUID: "B", MemoryMiB: 80000, Cores: 100, Split: 4},
		"S": {UUID: "S", MemoryMiB: 40000, Cores: 200, Split: 10}, // cores scaled twice over
		"M": {UUID: "M", MemoryMiB: 9984, Cores: 14, Split: 1},    // a MIG 1g.10gb
	}
	gpuOf := func(uuid string) (protocol.GPU, bool) { g, ok := gpus[uuid]; return g, ok }
	one := func(uuid string, mem int64, cores int) ContainerPlacement {
		return ContainerPlacement{Name: "c", GPUs: []protocol.GPUSlice{{UUID: uuid, MemoryMiB: mem, Cores: cores}}}
	}
	for _, tc := range []struct {
		name string
		pl   Placement
		want Usage
	}{
		{"a squatter's 1 MiB is a slot", Placement{one("A", 1, 1)}, Usage{MemMiB: 4000, Cores: 10, Slots: 1}},
		{"more than a slot is what it names", Placement{one("A", 9000, 35)}, Usage{MemMiB: 9000, Cores: 35, Slots: 1}},
		{"a slot of a GPU split 4", Placement{one("B", 1, 10)}, Usage{MemMiB: 20000, Cores: 25, Slots: 1}},
		{"every core holds the GPU whole", Placement{one("A", 1, 100)}, Usage{MemMiB: 40000, Cores: 100, Slots: 1, Exclusive: true}},
		{"two containers on one GPU take two slots", Placement{one("A", 1, 1), one("A", 1, 1)}, Usage{MemMiB: 8000, Cores: 20, Slots: 2}},
		{"one slot on each of two GPUs", Placement{{Name: "c", GPUs: []protocol.GPUSlice{{UUID: "A", MemoryMiB: 1, Cores: 1}, {UUID: "B", MemoryMiB: 1, Cores: 1}}}},
			Usage{MemMiB: 4000 + 20000, Cores: 10 + 25, Slots: 2}},
		{"a mutex slice holds the GPU whole, cores too", Placement{{Name: "c", GPUs: []protocol.GPUSlice{{UUID: "A", MemoryMiB: 8000, Cores: 30, Exclusive: true}}}},
			Usage{MemMiB: 40000, Cores: 100, Slots: 1, Exclusive: true, Mutex: true}},
		{"a mutex slice of a core-scaled GPU is charged one GPU's cores, as a whole-GPU slice", Placement{{Name: "c", GPUs: []protocol.GPUSlice{{UUID: "S", MemoryMiB: 8000, Cores: 30, Exclusive: true}}}},
			Usage{MemMiB: 40000, Cores: 100, Slots: 1, Exclusive: true, Mutex: true}},
		{"every core of a core-scaled GPU is charged what it names", Placement{one("S", 1, 100)}, Usage{MemMiB: 40000, Cores: 100, Slots: 1, Exclusive: true}},
		{"all the memory holds the GPU whole, cores too", Placement{one("A", 40000, 1)}, Usage{MemMiB: 40000, Cores: 100, Slots: 1}},
		{"all of a core-scaled GPU's memory is charged one GPU's cores", Placement{one("S", 40000, 5)}, Usage{MemMiB: 40000, Cores: 100, Slots: 1}},
		{"a MIG instance whole is its share of the SMs", Placement{one("M", 9984, 14)}, Usage{MemMiB: 9984, Cores: 14, Slots: 1}},
		{"an unknown GPU is charged what is named", Placement{one("gone", 7, 3)}, Usage{MemMiB: 7, Cores: 3, Slots: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.pl.Charge(gpuOf); got != tc.want {
				t.Fatalf("charge %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A slot's cores are never 0, which an interposer reads as unlimited,
// and never over 100 percent, whatever the split and core scaling.
func TestSlotShareBounds(t *testing.T) {
	for _, tc := range []struct {
		g    protocol.GPU
		want Usage
	}{
		{protocol.GPU{MemoryMiB: 81920, Cores: 100, Split: 10}, Usage{MemMiB: 8192, Cores: 10, Slots: 1}},
		{protocol.GPU{MemoryMiB: 81920, Cores: 100, Split: 3}, Usage{MemMiB: 27306, Cores: 33, Slots: 1}},
		{protocol.GPU{MemoryMiB: 81920, Cores: 100, Split: 1000}, Usage{MemMiB: 81, Cores: 1, Slots: 1}},
		{protocol.GPU{MemoryMiB: 81920, Cores: 10000, Split: 1}, Usage{MemMiB: 81920, Cores: 100, Slots: 1}},
		{protocol.GPU{MemoryMiB: 81920, Cores: 100, Split: 0}, Usage{MemMiB: 81920, Cores: 100, Slots: 1}},
	} {
		if got := SlotShare(tc.g); got != tc.want {
			t.Errorf("SlotShare(%+v) = %+v, want %+v", tc.g, got, tc.want)
		}
	}
}
