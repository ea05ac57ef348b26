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
