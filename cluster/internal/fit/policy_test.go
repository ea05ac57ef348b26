package fit

import (
	"slices"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol"
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
	for _, n := range []*Node{&loaded, &idle, &split} {
		n.Features = protocol.UnderstoodFeatures()
	}
	for _, tc := range []struct {
		n     Node
		chain string
		bind  bool
		want  string // the two GPUs chosen, or the refusal's kind
	}{
		{loaded, "spread", false, "GPU-1,GPU-2"},
		{loaded, "binpack", false, "GPU-0,GPU-3"},
		{loaded, "numa,spread", false, "GPU-1,GPU-0"},       // NUMA first: one node, then least loaded
		{loaded, "numa,binpack", false, "GPU-0,GPU-1"},      // the fullest GPU's node
		{loaded, "spread,numa", false, "GPU-1,GPU-2"},       // load decides; no ties cross NUMA here
		{loaded, "binpack,numa", false, "GPU-0,GPU-3"},      // no ties at all
		{loaded, "spread", true, "GPU-1,GPU-0"},             // numa-bind is NUMA first, and a rule
		{loaded, "binpack,numa", true, "GPU-0,GPU-1"},       // numa-bind outranks the chain's order
		{idle, "spread", false, "GPU-0,GPU-1"},              // ties by index
		{idle, "spread,numa", false, "GPU-0,GPU-2"},         // ties go to the first pick's node
		{idle, "binpack,numa", false, "GPU-0,GPU-2"},        //
		{idle, "numa", false, "GPU-0,GPU-2"},                // default load key
		{split, "numa,spread", false, "GPU-0,GPU-1"},        // no node has two: across, not refused
		{split, "spread,numa", false, "GPU-0,GPU-1"},        //
		{loaded, "mutex,binpack", false, "GPU-1,GPU-2"},     // idle GPUs only, whatever the load key
		{loaded, "mutex,numa", true, "no single NUMA node"}, // each NUMA node has one idle GPU
		{idle, "mutex,binpack,numa", false, "GPU-0,GPU-2"},  // HAMi's example chain
		{split, "numa", true, "no single NUMA node"},        // the binding refuses
		{split, "binpack,numa", true, "no single NUMA node"},
	} {
		p, err := podmodel.ParseGPUPolicy(tc.chain)
		if err != nil {
			t.Fatal(err)
		}
		req := Request{Containers: []podmodel.ContainerRequest{app("c", 2, 1000, 0)}, GPUPolicy: p.Or(podmodel.GPUPolicy{Load: podmodel.Spread}), SingleNUMA: tc.bind}
		pl, r := Place(tc.n, req, opts)
		got := picked(pl, r)
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

// A mutex container takes an idle GPU only and keeps the slice it asked;
// once booked, no other pod joins that GPU, and a mutex pod with no idle
// GPU is refused saying so. The pod's own containers share its GPU. The
// assignment marks the slice exclusive and so requires the feature, and
// a node whose vgpud does not list it gets no mutex pod.
func TestMutexHoldsTheGPUBothWays(t *testing.T) {
	n := node(gpu(0, "A100", 40000, 0), gpu(1, "A100", 40000, 0))
	n.Features = []string{protocol.FeatureMutex}
	n.GPUs[0].Used = podmodel.Usage{MemMiB: 1000, Cores: 10, Slots: 1}
	mutex := Request{Containers: []podmodel.ContainerRequest{app("m", 1, 8000, 30)}, GPUPolicy: podmodel.GPUPolicy{Load: podmodel.Binpack, Mutex: true}}
	pl, r := Place(n, mutex, opts)
	if r != nil || uuids(pl[0]) != "GPU-1:8000:30" || !pl[0].GPUs[0].Exclusive {
		t.Fatalf("mutex placed %v (%+v), %v; want the idle GPU-1 though binpack prefers GPU-0", uuids(pl[0]), pl[0].GPUs, r)
	}
	booked := n
	booked.GPUs = slices.Clone(n.GPUs)
	Add(&booked, pl)
	if u := booked.GPUs[1].Used; !u.Exclusive || !u.Mutex {
		t.Fatalf("the books do not hold GPU-1 alone: %+v", u)
	}
	later := Request{Containers: []podmodel.ContainerRequest{app("later", 1, 1000, 0)}, UseUUIDs: []string{"GPU-1"}}
	if _, r := Place(booked, later, opts); r == nil || r.Kind != "gpu in exclusive use" {
		t.Fatalf("a later pod joined the mutex pod's GPU: %+v", r)
	}
	if _, r := Place(booked, mutex, opts); r == nil || r.Kind != "gpu in exclusive use" || !strings.Contains(r.Text, "mutex request, not idle") {
		t.Fatalf("a second mutex pod with no idle GPU: %+v", r)
	}

	// init, sidecar and app containers of one mutex pod on one GPU.
	init := app("init", 1, 2000, 20)
	init.Kind = podmodel.KindInit
	side := sidecar("side", 1, 1000)
	own := Request{Containers: []podmodel.ContainerRequest{init, side, app("a", 1, 4000, 30)}, GPUPolicy: podmodel.GPUPolicy{Load: podmodel.Binpack, Mutex: true}}
	one := node(gpu(0, "A100", 40000, 0))
	one.Features = n.Features
	if pl, r := Place(one, own, opts); r != nil || len(pl) != 3 {
		t.Fatalf("a mutex pod's own containers do not share its GPU: %v", r)
	}

	// Under spread too: an init container does not take a second GPU,
	// which would be held, and charged, whole for the pod's life.
	three := node(gpu(0, "A100", 40000, 0), gpu(1, "A100", 40000, 0), gpu(2, "A100", 40000, 0))
	three.Features = n.Features
	spread := Request{Containers: []podmodel.ContainerRequest{init, app("a", 1, 4000, 30)}, GPUPolicy: podmodel.GPUPolicy{Load: podmodel.Spread, Mutex: true}}
	if pl, r := Place(three, spread, opts); r != nil || pl[0].GPUs[0].UUID != pl[1].GPUs[0].UUID {
		t.Fatalf("mutex under spread: %v, %v; want one GPU for the init and app containers", pl, r)
	}

	raw, err := protocol.EncodeAssignment(protocol.Assignment{Node: "n1", Containers: []protocol.ContainerAssignment{{Name: "m", GPUs: pl[0].GPUs}}})
	if err != nil || !strings.Contains(raw, `"requires":["mutex"]`) || !strings.Contains(raw, `"exclusive":true`) {
		t.Fatalf("assignment %s, %v", raw, err)
	}
	whole, _ := Place(n, Request{Containers: []podmodel.ContainerRequest{app("w", 1, 1000, 100)}, GPUPolicy: podmodel.GPUPolicy{Mutex: true}}, opts)
	if raw, _ := protocol.EncodeAssignment(protocol.Assignment{Node: "n1", Containers: []protocol.ContainerAssignment{{Name: "w", GPUs: whole[0].GPUs}}}); strings.Contains(raw, "requires") || strings.Contains(raw, "exclusive") {
		t.Fatalf("a 100-core slice needs no new field: %s", raw)
	}

	old := n
	old.Features = nil
	if r := Fits(old, mutex, opts); r == nil || r.Kind != "vgpud too old for mutex" {
		t.Fatalf("a node whose vgpud predates mutex: %+v", r)
	}
	if r := Fits(old, later, opts); r != nil {
		t.Fatalf("the same node refuses a pod without mutex: %+v", r)
	}
}

// topology-aware takes a multi-GPU container's GPUs from the closest set
// with enough: NVLink, then one PCIe switch, then one NUMA node, then as
// the load key orders them; within and among sets the load key decides.
func TestTopologyAwareTakesTheClosestSet(t *testing.T) {
	a100 := func(i, numa int, used int64) CommittedGPU {
		g := gpu(i, "A100", 40000, numa)
		if used > 0 {
			g.Used = podmodel.Usage{MemMiB: used, Cores: 10, Slots: 1}
		}
		return g
	}
	// Four GPUs on NUMA 0: NVLink joins 0-2 and 1-3; 0 and 1 share a
	// PCIe switch, and 2 and 3. GPU-2 is the fullest.
	n := node(a100(0, 0, 0), a100(1, 0, 0), a100(2, 0, 10000), a100(3, 0, 0), a100(4, 1, 0), a100(5, 1, 0))
	n.Sets = []Set{{Link: protocol.LinkNVLink, Mask: 0b0101}, {Link: protocol.LinkNVLink, Mask: 0b1010},
		{Link: protocol.LinkPCIeSwitch, Mask: 0b0011}, {Link: protocol.LinkPCIeSwitch, Mask: 0b1100}}
	for _, tc := range []struct {
		chain string
		gpus  int
		bind  bool
		full  []int // GPUs made too full to fit
		want  string
	}{
		{"spread", 2, false, nil, "GPU-0,GPU-1"},                        // no topology: by load, then index
		{"spread,topology-aware", 2, false, nil, "GPU-0,GPU-2"},         // the NVLink pair of the least loaded
		{"topology-aware,binpack", 2, false, nil, "GPU-2,GPU-0"},        // the NVLink pair of the fullest
		{"topology-aware,spread", 2, false, []int{0}, "GPU-1,GPU-3"},    // 0-2 broken: the other pair
		{"topology-aware", 2, false, []int{0, 3}, "GPU-1,GPU-2"},        // no pair left in a set: one NUMA node
		{"topology-aware", 2, false, []int{0, 2, 3, 5}, "GPU-1,GPU-4"},  // nothing closer: across NUMA nodes
		{"topology-aware", 3, false, nil, "GPU-0,GPU-1,GPU-3"},          // no set of three: one NUMA node
		{"topology-aware", 1, false, nil, "GPU-0"},                      // one GPU: as the load key
		{"topology-aware", 2, true, []int{0, 3}, "GPU-1,GPU-2"},         // numa-bind holds
		{"topology-aware", 3, true, []int{0, 1}, "no single NUMA node"}, // and refuses
		{"topology-aware", 2, false, []int{0, 1, 2, 3}, "GPU-4,GPU-5"},  // sets only where they fit
	} {
		m := n
		m.GPUs = slices.Clone(n.GPUs)
		for _, i := range tc.full {
			m.GPUs[i].Used = podmodel.Usage{MemMiB: 39500, Cores: 10, Slots: 1}
		}
		p, err := podmodel.ParseGPUPolicy(tc.chain)
		if err != nil {
			t.Fatal(err)
		}
		req := Request{Containers: []podmodel.ContainerRequest{app("c", tc.gpus, 1000, 0)}, GPUPolicy: p.Or(podmodel.GPUPolicy{Load: podmodel.Spread}), SingleNUMA: tc.bind}
		got := picked(Place(m, req, opts))
		if got != tc.want {
			t.Errorf("chain %q, %d GPUs, numa-bind %v, full %v: %s, want %s", tc.chain, tc.gpus, tc.bind, tc.full, got, tc.want)
		}
	}
}

// Sets by GPU index become masks over the node's GPUs in fit's order; a
// link this build does not know, or a set left with one known GPU, is
// skipped.
func TestSetsOf(t *testing.T) {
	gpus := []protocol.GPU{{Index: 4}, {Index: 0}, {Index: 7}}
	got := SetsOf([]protocol.GPUSet{
		{Link: protocol.LinkNVLink, GPUs: []int{0, 4, 7}},
		{Link: "c2c", GPUs: []int{0, 4}},
		{Link: protocol.LinkPCIeSwitch, GPUs: []int{7, 9}},
		{Link: protocol.LinkPCIeSwitch, GPUs: []int{4, 0}},
	}, gpus)
	if want := []Set{{Link: protocol.LinkNVLink, Mask: 0b111}, {Link: protocol.LinkPCIeSwitch, Mask: 0b011}}; !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

// With mutex, the GPUs a pod already holds come before any connected set:
// each more is held, and charged, whole.
func TestMutexOwnGPUsBeforeTopology(t *testing.T) {
	n := node(gpu(0, "A100", 40000, 0), gpu(1, "A100", 40000, 0), gpu(2, "A100", 40000, 0), gpu(3, "A100", 40000, 0))
	n.Features = protocol.UnderstoodFeatures()
	n.Sets = []Set{{Link: protocol.LinkPCIeSwitch, Mask: 0b0011}, {Link: protocol.LinkPCIeSwitch, Mask: 0b1100}}
	n.GPUs[1].Used = podmodel.Usage{MemMiB: 1000, Cores: 10, Slots: 1}
	init := app("init", 2, 1000, 10)
	init.Kind = podmodel.KindInit
	p, _ := podmodel.ParseGPUPolicy("mutex,spread,topology-aware")
	pl, r := Place(n, Request{Containers: []podmodel.ContainerRequest{init, app("a", 1, 1000, 10)}, GPUPolicy: p}, opts)
	if r != nil {
		t.Fatal(r)
	}
	held := map[string]bool{}
	for _, c := range pl {
		for _, g := range c.GPUs {
			held[g.UUID] = true
		}
	}
	if len(held) != 2 {
		t.Fatalf("the pod holds %v; want 2 GPUs, the init container's including the app's", held)
	}
}

// picked is the first container's GPUs, comma-separated, or the
// refusal's kind.
func picked(pl podmodel.Placement, r *Reason) string {
	if r != nil {
		return r.Kind
	}
	var ids []string
	for _, g := range pl[0].GPUs {
		ids = append(ids, g.UUID)
	}
	return strings.Join(ids, ",")
}
