package inventory

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/migmaker"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/mig"
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
	inv := Build(devs, Scaling{Split: 4, Memory: 2, Cores: 1}, map[string]bool{devs[2].UUID: true}, OnDemand{})
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

// Where the node makes instances on demand, the GPU lists what it may
// make around the operator's instances, the instances it made under
// their possible names, never as the operator's.
func TestBuildListsPossibleInstances(t *testing.T) {
	lib, err := gpu.Open("fake:1xH100-SXM5-80GB:81920:mig=1g.10gb", "n1") // the operator's, at 0
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := gpu.Discover(lib)
	parent := devs[0].UUID
	ps, err := gpu.MIGProfiles(lib, parent)
	if err != nil {
		t.Fatal(err)
	}
	cat := migmaker.Catalog(map[string][]gpu.MIGProfile{parent: ps}, func(p string) bool { return p != "7g.80gb" })
	id := protocol.OnDemandID(parent, "3g.40gb", 4)
	made, err := gpu.MakeMIG(lib, parent, cat[id].Profile, cat[id].At)
	if err != nil {
		t.Fatal(err)
	}
	devs, _ = gpu.Discover(lib) // as a rescan would see them
	od := OnDemand{Catalog: cat, Made: map[string]string{id: made.UUID}, Ours: func(u string) bool { return u == made.UUID },
		OursAt: map[string][]mig.Span{parent: {cat[id].At}}}
	raw, err := protocol.EncodeInventory(Build(devs, Scaling{Split: 1, Memory: 1, Cores: 1}, nil, od))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := protocol.DecodeInventory(raw)
	m := got.MIG[0]
	if len(m.Instances) != 1 || m.Instances[0].Start != 0 {
		t.Errorf("instances %+v, want the operator's alone", m.Instances)
	}
	var names []string
	for _, p := range m.Possible {
		names = append(names, p.Profile+"@"+strconv.Itoa(p.Start)+p.Made)
		if p.Start == 0 {
			t.Errorf("%s at 0, over the operator's instance", p.Profile)
		}
	}
	if len(m.Possible) != 12 || !slices.Contains(names, "3g.40gb@4"+made.UUID) || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "7g") }) {
		t.Errorf("possible %v: want 12 (6 1g.10gb, 2 2g.20gb, 3g.40gb at 4 made, 3 1g.20gb), none 7g.80gb", names)
	}
}

// An instance kept for processes of an ended pod is listed as kept, its
// placement offered to none, for the leader to charge.
func TestBuildListsKeptInstances(t *testing.T) {
	lib, err := gpu.Open("fake:1xH100-SXM5-80GB:81920:mig=", "n1")
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := gpu.Discover(lib)
	parent := devs[0].UUID
	ps, _ := gpu.MIGProfiles(lib, parent)
	cat := migmaker.Catalog(map[string][]gpu.MIGProfile{parent: ps}, func(string) bool { return true })
	id := protocol.OnDemandID(parent, "3g.40gb", 4)
	made, err := gpu.MakeMIG(lib, parent, cat[id].Profile, cat[id].At)
	if err != nil {
		t.Fatal(err)
	}
	devs, _ = gpu.Discover(lib)
	kept := Kept{Slot: cat[id], Made: made.UUID, Pod: "uid-1"}
	delete(cat, id) // as the node role hides it
	od := OnDemand{Catalog: cat, Made: map[string]string{}, Ours: func(u string) bool { return u == made.UUID },
		Taken: map[string][]mig.Span{parent: {kept.At}}, OursAt: map[string][]mig.Span{parent: {kept.At}}, Kept: map[string]Kept{id: kept}}
	raw, err := protocol.EncodeInventory(Build(devs, Scaling{Split: 1, Memory: 1, Cores: 1}, nil, od))
	if err != nil {
		t.Fatal(err)
	}
	got, err := protocol.DecodeInventory(raw)
	if err != nil {
		t.Fatal(err)
	}
	m := got.MIG[0]
	if len(m.Kept) != 1 || m.Kept[0].UUID != id || m.Kept[0].Made != made.UUID || m.Kept[0].Pod != "uid-1" || m.Kept[0].MemoryMiB != kept.MemoryMiB || m.Kept[0].SMs == 0 {
		t.Fatalf("kept %+v; want %s made as %s", m.Kept, id, made.UUID)
	}
	for _, p := range m.Possible {
		if p.Start < 8 && p.Start+p.Size > 4 {
			t.Errorf("%s offered over the kept instance", p.UUID)
		}
	}
}

// A GPU instance no MIG device describes (split into compute instances,
// or with none) takes its placement: nothing made on demand overlaps it.
func TestBuildKeepsUndescribedInstancesPlacements(t *testing.T) {
	lib, err := gpu.Open("fake:1xH100-SXM5-80GB:81920:mig=", "n1")
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := gpu.Discover(lib)
	parent := devs[0].UUID
	ps, _ := gpu.MIGProfiles(lib, parent)
	d, _ := lib.DeviceGetHandleByUUID(parent)
	p, _ := d.GetGpuInstanceProfileInfo(ps[1].ID) // 2g.20gb
	if _, ret := d.CreateGpuInstanceWithPlacement(&p, &nvml.GpuInstancePlacement{Start: 2, Size: 2}); ret != nvml.SUCCESS {
		t.Fatal(nvml.ErrorString(ret))
	}
	devs, _ = gpu.Discover(lib)
	cat := migmaker.Catalog(map[string][]gpu.MIGProfile{parent: ps}, func(string) bool { return true })
	inv := Build(devs, Scaling{Split: 1, Memory: 1, Cores: 1}, nil, OnDemand{Catalog: cat, Ours: func(string) bool { return false }})
	for _, in := range inv.MIG[0].Possible {
		if in.Start < 4 && in.Start+in.Size > 2 {
			t.Errorf("%s at %d+%d overlaps the GPU instance at 2+2 that has no MIG device", in.Profile, in.Start, in.Size)
		}
	}
	if len(inv.MIG[0].Instances) != 0 || len(inv.MIG[0].Possible) == 0 {
		t.Errorf("instances %v, possible %d: want none listed, some possible", inv.MIG[0].Instances, len(inv.MIG[0].Possible))
	}
}
