package protocol

import (
	"strings"
	"testing"
)

// What a node may list as possible instances, and what it may not.
func TestPossibleInstances(t *testing.T) {
	base := func() Inventory {
		g := MIGGPU{UUID: "GPU-m", Index: 0, MemoryMiB: 40960, SMs: 98, Healthy: true,
			Instances: []MIGInstance{{UUID: "MIG-op", Profile: "1g.5gb", MemoryMiB: 4864, SMs: 14, Start: 6, Size: 1}}}
		for _, p := range []struct {
			profile string
			start   int
			size    int
		}{{"1g.5gb", 0, 1}, {"1g.5gb", 1, 1}, {"3g.20gb", 0, 4}} {
			g.Possible = append(g.Possible, MIGInstance{UUID: OnDemandID(g.UUID, p.profile, p.start), Profile: p.profile, MemoryMiB: 4864 * int64(p.size), SMs: 14 * p.size, Start: p.start, Size: p.size})
		}
		return Inventory{Version: Version, GPUs: []GPU{}, MIG: []MIGGPU{g}}
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("alternatives that overlap each other: %v", err)
	}
	inv := base()
	inv.MIG[0].Possible[0].Made = "MIG-made"
	if err := inv.Validate(); err != nil {
		t.Fatalf("one made: %v", err)
	}
	gpus, refs := inv.Bookable()
	if len(gpus) != 4 || !refs[OnDemandID("GPU-m", "1g.5gb", 0)].Made || !refs[OnDemandID("GPU-m", "3g.20gb", 0)].OnDemand || refs["MIG-op"].OnDemand {
		t.Errorf("bookable %v %v: want the operator's instance, then three possible, one made", gpus, refs)
	}
	for want, change := range map[string]func(*MIGGPU){
		"want the name":            func(g *MIGGPU) { g.Possible[1].UUID = "MIG-x" },
		"once":                     func(g *MIGGPU) { g.Possible = append(g.Possible, g.Possible[0]) },
		"overlaps instance MIG-op": func(g *MIGGPU) { g.Possible[1].Start, g.Possible[1].UUID = 6, OnDemandID(g.UUID, "1g.5gb", 6) },
		"also made": func(g *MIGGPU) {
			g.Possible[0].Made, g.Possible[2].Made = "MIG-a", "MIG-b"
		},
		"must be a MIG device's UUID": func(g *MIGGPU) { g.Possible[0].Made = "GPU-x" },
		"sms 99":                      func(g *MIGGPU) { g.Possible[0].SMs = 99 },
		"placement 15+2": func(g *MIGGPU) {
			g.Possible[1].Start, g.Possible[1].Size, g.Possible[1].UUID = 15, 2, OnDemandID(g.UUID, "1g.5gb", 15)
		},
	} {
		inv := base()
		change(&inv.MIG[0])
		if err := inv.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v", want, err)
		}
	}
}

// Make marks exactly the MIG slices named as possible instances, and
// such an assignment requires the feature.
func TestAssignmentMake(t *testing.T) {
	id := OnDemandID("GPU-m", "1g.5gb", 0)
	a := Assignment{Node: "n1", Containers: []ContainerAssignment{{Name: "c", GPUs: []GPUSlice{{UUID: id, MemoryMiB: 4864, Cores: 15, MIG: true, Make: true}}}}}
	raw, err := EncodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeAssignment(raw)
	if err != nil || !back.Makes() || !strings.Contains(strings.Join(back.Requires, ","), FeatureMIGOnDemand) {
		t.Fatalf("%+v, %v", back, err)
	}
	for _, s := range []GPUSlice{
		{UUID: id, MemoryMiB: 1, MIG: true},                     // named so, not marked
		{UUID: "MIG-real", MemoryMiB: 1, MIG: true, Make: true}, // marked, a device
		{UUID: id, MemoryMiB: 1, Make: true},                    // marked, not MIG
	} {
		a.Containers[0].GPUs = []GPUSlice{s}
		if _, err := EncodeAssignment(a); err == nil || !strings.Contains(err.Error(), "make is set exactly") {
			t.Errorf("%+v: err %v", s, err)
		}
	}
}
