package fit

import (
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol/podmodel"
)

// Each combination of load key, numa's place in the chain and numa-bind,
// on two layouts: one where load and NUMA pull apart, one of idle GPUs
// where only NUMA separates them.
func TestGPUPolicyChains(t *testing.T) {
	a100 := func(i, numa int, used int64) CommittedGPU {
		g := gpu(i, "A100", 40000, numa)
		if used > 0 {
			g.Used = podmodel.Usage{MemMiB: used, Cores: 10, Slots: 1}
		}
		return g
	}
	// GPU-0 half full and GPU-3 a quarter; GPU-0 and GPU-1 on NUMA 0.
	loaded := node(a100(0, 0, 20000), a100(1, 0, 0), a100(2, 1, 0), a100(3, 1, 10000))
	idle := node(a100(0, 0, 0), a100(1, 1, 0), a100(2, 0, 0))
	split := node(a100(0, 0, 0), a100(1, 1, 0))
	for _, tc := range []struct {
		n     Node
		chain string
		bind  bool
		want  string // the two GPUs chosen, or the refusal's kind
	}{
		{loaded, "spread", false, "GPU-1,GPU-2"},
		{loaded, "binpack", false, "GPU-0,GPU-3"},
		{loaded, "numa,spread", false, "GPU-1,GPU-0"},  // NUMA first: one node, then least loaded
		{loaded, "numa,binpack", false, "GPU-0,GPU-1"}, // the fullest GPU's node
		{loaded, "spread,numa", false, "GPU-1,GPU-2"},  // load decides; no ties cross NUMA here
		{loaded, "binpack,numa", false, "GPU-0,GPU-3"}, // no ties at all
		{loaded, "spread", true, "GPU-1,GPU-0"},        // numa-bind is NUMA first, and a rule
		{loaded, "binpack,numa", true, "GPU-0,GPU-1"},  // numa-bind outranks the chain's order
		{idle, "spread", false, "GPU-0,GPU-1"},         // ties by index
		{idle, "spread,numa", false, "GPU-0,GPU-2"},    // ties go to the first pick's node
		{idle, "binpack,numa", false, "GPU-0,GPU-2"},   //
		{idle, "numa", false, "GPU-0,GPU-2"},           // default load key
		{split, "numa,spread", false, "GPU-0,GPU-1"},   // no node has two: across, not refused
		{split, "spread,numa", false, "GPU-0,GPU-1"},   //
		{split, "numa", true, "no single NUMA node"},   // the binding refuses
		{split, "binpack,numa", true, "no single NUMA node"},
	} {
		p, err := podmodel.ParseGPUPolicy(tc.chain)
		if err != nil {
			t.Fatal(err)
		}
		req := Request{Containers: []podmodel.ContainerRequest{app("c", 2, 1000, 0)}, GPUPolicy: p.Or(podmodel.GPUPolicy{Load: podmodel.Spread}), SingleNUMA: tc.bind}
		pl, r := Place(tc.n, req, opts)
		got := ""
		if r != nil {
			got = r.Kind
		} else {
			var ids []string
			for _, g := range pl[0].GPUs {
				ids = append(ids, g.UUID)
			}
			got = strings.Join(ids, ",")
		}
		if got != tc.want {
			t.Errorf("%v, chain %q, numa-bind %v: %s, want %s", uuidsOf(tc.n), tc.chain, tc.bind, got, tc.want)
		}
		if (Fits(tc.n, req, opts) == nil) != (r == nil) {
			t.Errorf("chain %q, numa-bind %v: Fits disagrees with Place", tc.chain, tc.bind)
		}
	}
}

func uuidsOf(n Node) []string {
	var s []string
	for _, g := range n.GPUs {
		s = append(s, g.UUID)
	}
	return s
}
