package protocol

import (
	"strings"
	"testing"
)

// A node's connected sets name its own GPUs, each once, at least two to
// a set; a link this build does not know is kept for the reader to skip.
func TestInventorySets(t *testing.T) {
	gpus := []GPU{{UUID: "GPU-0", Index: 0, MemoryMiB: 1, Cores: 100, Split: 1}, {UUID: "GPU-1", Index: 1, MemoryMiB: 1, Cores: 100, Split: 1}}
	for _, tc := range []struct {
		sets []GPUSet
		err  string
	}{
		{sets: []GPUSet{{Link: LinkNVLink, GPUs: []int{0, 1}}, {Link: "c2c", GPUs: []int{1, 0}}}},
		{sets: []GPUSet{{Link: LinkNVLink, GPUs: []int{0}}}, err: "a set joins at least 2"},
		{sets: []GPUSet{{Link: LinkNVLink, GPUs: []int{0, 2}}}, err: "GPU index 2 is not one of the node's"},
		{sets: []GPUSet{{Link: LinkPCIeSwitch, GPUs: []int{1, 1}}}, err: "appears twice"},
		{sets: make([]GPUSet, maxSets+1), err: "more than 256"},
	} {
		raw, err := EncodeInventory(Inventory{GPUs: gpus, Sets: tc.sets})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: %v, want %q", tc.sets, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if inv, err := DecodeInventory(raw); err != nil || len(inv.Sets) != len(tc.sets) {
			t.Errorf("%s: %+v, %v", raw, inv.Sets, err)
		}
	}
}

// A MIG GPU's instances are whole GPU instances: two on the same memory
// slices, or an instance UUID a shared GPU has too, are refused.
func TestMIGValidation(t *testing.T) {
	good := func() Inventory {
		return Inventory{Version: Version, GPUs: []GPU{{UUID: "GPU-s", Index: 0, MemoryMiB: 1, Cores: 100, Split: 1}},
			MIG: []MIGGPU{{UUID: "GPU-m", Index: 1, MemoryMiB: 40960, SMs: 98, Instances: []MIGInstance{
				{UUID: "MIG-a", Profile: "3g.20gb", MemoryMiB: 19968, SMs: 42, Start: 0, Size: 4},
				{UUID: "MIG-b", Profile: "1g.5gb", MemoryMiB: 4864, SMs: 14, Start: 4, Size: 1}}}}}
	}
	if err := good().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		bad  func(*Inventory)
		want string
	}{
		"overlap":           {func(inv *Inventory) { inv.MIG[0].Instances[1].Start = 3 }, "overlaps MIG-a's"},
		"uuid of a GPU":     {func(inv *Inventory) { inv.MIG[0].Instances[1].UUID = "GPU-s" }, "appears twice"},
		"index of a GPU":    {func(inv *Inventory) { inv.MIG[0].Index = 0 }, "appears twice"},
		"more SMs than all": {func(inv *Inventory) { inv.MIG[0].Instances[0].SMs = 99 }, "within 1..98"},
	} {
		inv := good()
		tc.bad(&inv)
		if err := inv.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to say %q", name, err, tc.want)
		}
	}
}
