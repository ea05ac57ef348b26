package inventory

import (
	"fmt"
	"testing"

	"github.com/vgpud/vgpud/node/internal/gpu"
)

// The node's connected sets are the largest groups every two of which
// share the link: one for an NVSwitch machine, the bridged pairs, the
// overlapping fours of a hybrid cube mesh; NVLink before PCIe, larger
// first.
func TestSetsAreMaximalCliques(t *testing.T) {
	machine := func(n int, nvlink, pcie func(i, j int) bool) []gpu.Device {
		devs := make([]gpu.Device, n)
		for i := range devs {
			devs[i].Index = i
			for j := 0; j < n; j++ {
				if j != i && nvlink(i, j) {
					devs[i].NVLink = append(devs[i].NVLink, j)
				}
				if j != i && pcie(i, j) {
					devs[i].PCIeSwitch = append(devs[i].PCIeSwitch, j)
				}
			}
		}
		return devs
	}
	none := func(i, j int) bool { return false }
	// DGX-1's hybrid cube mesh: two fully linked quads, each GPU also
	// linked to its twin in the other quad.
	cube := func(i, j int) bool { return i/4 == j/4 || i%4 == j%4 }
	for _, tc := range []struct {
		name string
		devs []gpu.Device
		want string
	}{
		{"NVSwitch, PCIe pairs", machine(8, func(i, j int) bool { return true }, func(i, j int) bool { return i/2 == j/2 }),
			"[{nvlink [0 1 2 3 4 5 6 7]} {pcie-switch [0 1]} {pcie-switch [2 3]} {pcie-switch [4 5]} {pcie-switch [6 7]}]"},
		{"bridged pairs", machine(4, func(i, j int) bool { return i/2 == j/2 }, none), "[{nvlink [0 1]} {nvlink [2 3]}]"},
		{"hybrid cube mesh", machine(8, cube, none),
			"[{nvlink [0 1 2 3]} {nvlink [4 5 6 7]} {nvlink [0 4]} {nvlink [1 5]} {nvlink [2 6]} {nvlink [3 7]}]"},
		{"nothing joined", machine(4, none, none), "[]"},
	} {
		if got := fmt.Sprint(Sets(tc.devs)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	// A graph no machine has, with 3^12 maximal cliques: the search
	// stops at the most an inventory carries.
	if got := len(Sets(machine(36, func(i, j int) bool { return i/3 != j/3 }, none))); got != maxSets {
		t.Errorf("clique explosion: %d sets, want the cap %d", got, maxSets)
	}
}
