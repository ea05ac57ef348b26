package inventory

import (
	"testing"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/protocol"
)

func TestBuildListsMIGGPUsApart(t *testing.T) {
	lib, err := gpu.Open("fake:2xNVIDIA L4:23034:pcie=0,1xA100-SXM4-40GB:40960:pcie=0:mig=3g.20gb+1g.5gb", "n1")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := gpu.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	inv := Build(devs, Scaling{Split: 4, Memory: 2, Cores: 1}, map[string]bool{devs[2].UUID: true})
	raw, err := protocol.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	got, err := protocol.DecodeInventory(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.GPUs) != 2 || len(got.MIG) != 1 {
		t.Fatalf("%d shared and %d MIG GPUs, want 2 and 1", len(got.GPUs), len(got.MIG))
	}
	m := got.MIG[0]
	if m.Index != 2 || m.Healthy || m.SMs != 98 || m.MemoryMiB != 40960 || len(m.Instances) != 2 {
		t.Errorf("MIG GPU %+v: want index 2, unhealthy, 98 SMs, 40960 MiB unscaled, 2 instances", m)
	}
	if in := m.Instances[1]; in.Profile != "1g.5gb" || in.MemoryMiB != 4864 || m.Cores(in) != 15 {
		t.Errorf("instance %+v charged %d cores, want 1g.5gb with 4864 MiB and 15 cores (14 of 98 SMs)", in, m.Cores(in))
	}
	// The A100 behind the same switch is in no set: only its instances
	// serve, each alone.
	for _, s := range got.Sets {
		for _, i := range s.GPUs {
			if i == 2 {
				t.Errorf("set %+v holds the MIG GPU", s)
			}
		}
	}
	if len(got.Sets) != 1 {
		t.Errorf("sets %+v, want the two L4s", got.Sets)
	}
}
