package fit

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// Add agrees with podmodel's footprint rule, without allocating.
func TestAddIsTheFootprint(t *testing.T) {
	var uuids []string
	n := Node{Name: "n"}
	for i := range 8 {
		uuids = append(uuids, fmt.Sprintf("G%d", i))
		n.GPUs = append(n.GPUs, CommittedGPU{GPU: protocol.GPU{UUID: uuids[i], MemoryMiB: 40000, Cores: 100, Split: 10}})
	}
	p := podmodel.Placement{
		{Name: "init", Kind: podmodel.KindInit, GPUs: []protocol.GPUSlice{{UUID: "G1", MemoryMiB: 9000, Cores: 50}}},
		{Name: "side", Kind: podmodel.KindSidecar, GPUs: []protocol.GPUSlice{{UUID: "G1", MemoryMiB: 1000, Cores: 10}}},
		{Name: "app", Kind: podmodel.KindApp, GPUs: []protocol.GPUSlice{{UUID: "G1", MemoryMiB: 3000, Cores: 20}, {UUID: "G7", MemoryMiB: 2000, Cores: 100}, {UUID: "gone", MemoryMiB: 1}}},
	}
	Add(&n, p)
	var got []podmodel.Usage
	for _, g := range n.GPUs {
		got = append(got, g.Used)
	}
	if want := p.Footprint(uuids); !reflect.DeepEqual(got, want) {
		t.Fatalf("Add %+v\nFootprint %+v", got, want)
	}
	if allocs := testing.AllocsPerRun(100, func() { Add(&n, p) }); allocs != 0 {
		t.Errorf("Add allocates %.0f times per call", allocs)
	}
}
