package fit

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

func gpu(i int, model string, mem int64, numa int) CommittedGPU {
	return CommittedGPU{GPU: protocol.GPU{UUID: fmt.Sprintf("GPU-%d", i), Index: i, Model: model, MemoryMiB: mem, Cores: 100, Split: 10, NUMA: numa, Healthy: true}}
}

func node(gpus ...CommittedGPU) Node { return Node{Name: "n1", GPUs: gpus} }

func app(name string, gpus int, mem int64, cores int) podmodel.ContainerRequest {
	return podmodel.ContainerRequest{Name: name, GPUs: gpus, HasGPUs: true, MemoryMiB: mem, Cores: cores}
}

func uuids(c podmodel.ContainerPlacement) string {
	var s []string
	for _, g := range c.GPUs {
		s = append(s, fmt.Sprintf("%s:%d:%d", g.UUID, g.MemoryMiB, g.Cores))
	}
	return strings.Join(s, ",")
}

var opts = Options{DefaultMemPercent: 100}

func TestPlace(t *testing.T) {
	used := func(g CommittedGPU, mem int64, cores, slots int) CommittedGPU {
		g.Used = podmodel.Usage{MemMiB: mem, Cores: cores, Slots: slots}
		return g
	}
	a100 := func(i, numa int) CommittedGPU { return gpu(i, "NVIDIA A100-SXM4-40GB", 40000, numa) }
	unhealthy := a100(1, 0)
	unhealthy.Healthy = false
	excl := a100(0, 0)
	excl.Used = podmodel.Usage{MemMiB: 40000, Cores: 100, Slots: 1, Exclusive: true}
	cordoned := func(g CommittedGPU) CommittedGPU { g.Cordoned = true; return g }
	held := func(g CommittedGPU, mib int64) CommittedGPU { g.Held = mib; return g }
	full := func(g CommittedGPU) CommittedGPU { g.Full = true; return g } // the flag alone refuses
	init := app("init", 1, 30000, 0)
	init.Kind = podmodel.KindInit

	for _, tc := range []struct {
		name       string
		n          Node
		req        Request
		want       []string // per container, "uuid:mem:cores,..."
		wantReason string   // Kind, when it must not fit
		wantText   string
	}{
		{name: "spread picks the emptier gpu", n: node(used(a100(0, 0), 20000, 0, 1), a100(1, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 10000, 20)}}, want: []string{"GPU-1:10000:20"}},
		{name: "binpack picks the fuller gpu", n: node(used(a100(0, 0), 20000, 0, 1), a100(1, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 10000, 20)}, GPUPolicy: podmodel.GPUPolicy{Load: podmodel.Binpack}}, want: []string{"GPU-0:10000:20"}},
		{name: "memory percentage of that gpu", n: node(a100(0, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{{Name: "c", GPUs: 1, MemoryPercent: 25}}}, want: []string{"GPU-0:10000:10"}},
		{name: "default memory is the whole card", n: node(a100(0, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{{Name: "c", GPUs: 1}}}, want: []string{"GPU-0:40000:10"}},
		{name: "two gpus are distinct", n: node(a100(0, 0), a100(1, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 2, 1000, 0)}}, want: []string{"GPU-0:1000:10,GPU-1:1000:10"}},
		{name: "insufficient memory names the largest free", n: node(used(a100(0, 0), 34000, 0, 1), used(a100(1, 0), 38000, 0, 1)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 10000, 0)}}, wantReason: "insufficient gpumem", wantText: "largest free 6000 MiB < 10000"},
		{name: "memory held beyond bookings is not free", n: node(held(used(a100(0, 0), 8000, 10, 1), 30000)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 10000, 0)}}, wantReason: "insufficient gpumem",
			wantText: "largest free 2000 MiB (30000 MiB held beyond bookings, as the node reports) < 10000"},
		{name: "held memory that leaves room", n: node(held(a100(0, 0), 30000)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 10000, 0)}}, want: []string{"GPU-0:10000:10"}},
		{name: "a gpu short only for held memory is named", n: node(used(a100(0, 0), 35000, 0, 1), held(a100(1, 0), 38000)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 10000, 0)}}, wantReason: "insufficient gpumem",
			wantText: "largest free 5000 MiB < 10000; 1 GPU(s) would hold it but for memory held beyond bookings, as the node reports"},
		{name: "held memory past the gpu's own", n: node(held(used(a100(0, 0), 20000, 10, 1), 30000)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1000, 0)}}, wantReason: "insufficient gpumem",
			wantText: "largest free 0 MiB (30000 MiB held beyond bookings, as the node reports) < 1000"},
		{name: "spread counts held memory as load", n: node(held(a100(0, 0), 20000), used(a100(1, 0), 10000, 10, 1)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1000, 0)}}, want: []string{"GPU-1:1000:10"}},
		{name: "a full gpu takes no slice", n: node(full(a100(0, 0)), cordoned(a100(1, 0))),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1, 0)}}, wantReason: "gpu full",
			wantText: "1 GPU(s) full: their processes hold all their memory, as the node reports"},
		{name: "a full gpu is passed over", n: node(full(a100(0, 0)), used(a100(1, 0), 30000, 10, 1)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1000, 0)}, GPUPolicy: podmodel.GPUPolicy{Load: podmodel.Spread}}, want: []string{"GPU-1:1000:10"}},
		{name: "insufficient cores", n: node(used(a100(0, 0), 0, 90, 1)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1000, 20)}}, wantReason: "insufficient gpucores", wantText: "largest free 10 < 20"},
		{name: "split slots run out", n: node(used(a100(0, 0), 1000, 0, 10)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1000, 0)}}, wantReason: "no free slot"},
		{name: "unhealthy gpus are skipped", n: node(unhealthy),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1000, 0)}}, wantReason: "no healthy gpu"},
		{name: "a cordoned gpu is never chosen, even emptier", n: node(used(a100(0, 0), 20000, 0, 1), cordoned(a100(1, 0))),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1000, 0)}}, want: []string{"GPU-0:1000:10"}},
		{name: "only cordoned gpus left", n: node(cordoned(a100(0, 0)), cordoned(a100(1, 0))),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1000, 0)}}, wantReason: "gpu cordoned", wantText: "2 GPU(s) cordoned by an operator (vgpud.io/cordon)"},
		{name: "100 cores needs an idle gpu", n: node(used(a100(0, 0), 1000, 0, 1), a100(1, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1000, 100)}}, want: []string{"GPU-1:1000:100"}},
		{name: "nobody joins an exclusive gpu", n: node(excl),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1, 0)}}, wantReason: "gpu in exclusive use"},
		{name: "a 100-core container is exclusive within its pod too", n: node(a100(0, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{app("a", 1, 1000, 100), app("b", 1, 1000, 0)}}, wantReason: "gpu in exclusive use"},
		{name: "use-gputype", n: node(gpu(0, "Tesla T4", 16000, 0), a100(1, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1000, 0)}, UseTypes: []string{"a100"}}, want: []string{"GPU-1:1000:10"}},
		{name: "nouse-gputype", n: node(gpu(0, "Tesla T4", 16000, 0), a100(1, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1000, 0)}, NoUseTypes: []string{"A100"}}, want: []string{"GPU-0:1000:10"}},
		{name: "use-gpuuuid", n: node(a100(0, 0), a100(1, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1000, 0)}, UseUUIDs: []string{"gpu-1"}}, want: []string{"GPU-1:1000:10"}},
		{name: "selectors exclude everything", n: node(a100(0, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 1, 1000, 0)}, NoUseUUIDs: []string{"GPU-0"}}, wantReason: "no matching gpu"},
		{name: "single NUMA keeps a container on one node", n: node(a100(0, 0), a100(1, 1), a100(2, 1)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 2, 1000, 0)}, SingleNUMA: true}, want: []string{"GPU-1:1000:10,GPU-2:1000:10"}},
		{name: "single NUMA impossible", n: node(a100(0, 0), a100(1, 1)),
			req: Request{Containers: []podmodel.ContainerRequest{app("c", 2, 1000, 0)}, SingleNUMA: true}, wantReason: "no single NUMA node"},
		{name: "app containers add up", n: node(a100(0, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{app("a", 1, 25000, 0), app("b", 1, 25000, 0)}}, wantReason: "insufficient gpumem"},
		{name: "init container counts at peak, not on top", n: node(a100(0, 0)),
			req:  Request{Containers: []podmodel.ContainerRequest{init, app("a", 1, 20000, 0), app("b", 1, 15000, 0)}},
			want: []string{"GPU-0:30000:10", "GPU-0:20000:10", "GPU-0:15000:10"}},
		{name: "an init container larger than what is free does not fit", n: node(used(a100(0, 0), 15000, 0, 1)),
			req: Request{Containers: []podmodel.ContainerRequest{init, app("a", 1, 1000, 0)}}, wantReason: "insufficient gpumem"},
		{name: "a sidecar holds its slice beside the apps", n: node(a100(0, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{sidecar("proxy", 1, 20000), app("a", 1, 25000, 0)}}, wantReason: "insufficient gpumem"},
		{name: "an init container after a sidecar runs beside it", n: node(a100(0, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{sidecar("proxy", 1, 15000), init, app("a", 1, 1000, 0)}}, wantReason: "insufficient gpumem"},
		{name: "an init container before a sidecar does not", n: node(a100(0, 0)),
			req:  Request{Containers: []podmodel.ContainerRequest{init, sidecar("proxy", 1, 5000), app("a", 1, 1000, 0)}},
			want: []string{"GPU-0:30000:10", "GPU-0:5000:10", "GPU-0:1000:10"}},
		{name: "containers without gpus are skipped", n: node(a100(0, 0)),
			req: Request{Containers: []podmodel.ContainerRequest{{Name: "sidecar"}, app("c", 1, 1000, 0)}}, want: []string{"GPU-0:1000:10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := fmt.Sprint(tc.n)
			pl, reason := Place(tc.n, tc.req, opts)
			if fr := Fits(tc.n, tc.req, opts); (fr == nil) != (reason == nil) || (fr != nil && *fr != *reason) {
				t.Fatalf("Fits %+v disagrees with Fit %+v", fr, reason)
			}
			if fmt.Sprint(tc.n) != before {
				t.Fatal("Fit changed the node")
			}
			if tc.wantReason != "" {
				if reason == nil {
					t.Fatalf("fits with %+v, want %q", pl, tc.wantReason)
				}
				if reason.Kind != tc.wantReason || !strings.Contains(reason.Text, tc.wantText) {
					t.Fatalf("reason %+v, want kind %q containing %q", reason, tc.wantReason, tc.wantText)
				}
				return
			}
			if reason != nil {
				t.Fatalf("does not fit: %+v", reason)
			}
			if len(pl) != len(tc.want) {
				t.Fatalf("placement %+v", pl)
			}
			for i, w := range tc.want {
				if got := uuids(pl[i]); got != w {
					t.Errorf("container %d: %s, want %s", i, got, w)
				}
			}
		})
	}
}

func sidecar(name string, gpus int, mem int64) podmodel.ContainerRequest {
	c := app(name, gpus, mem, 0)
	c.Kind = podmodel.KindSidecar
	return c
}

func TestPlaceThenAdd(t *testing.T) {
	n := node(gpu(0, "A100", 40000, 0), gpu(1, "A100", 40000, 0))
	init := app("init", 1, 30000, 0)
	init.Kind = podmodel.KindInit
	req := Request{Containers: []podmodel.ContainerRequest{init, app("a", 2, 20000, 10), app("b", 1, 5000, 0)}}
	pl, reason := Place(n, req, opts)
	if reason != nil {
		t.Fatal(reason)
	}
	// The books rebuild from the assignment alone: Add of the placement.
	// a: 20000 on both; b joins GPU-0 (spread tie goes to the lower index);
	// init (30000) goes to the less loaded GPU-1, where it is the peak.
	Add(&n, pl)
	if n.GPUs[0].Used != (podmodel.Usage{MemMiB: 25000, Cores: 20, Slots: 2}) || n.GPUs[1].Used != (podmodel.Usage{MemMiB: 30000, Cores: 10, Slots: 1}) {
		t.Fatalf("peak footprint %+v, %+v", n.GPUs[0].Used, n.GPUs[1].Used)
	}
	if _, r := Place(n, Request{Containers: []podmodel.ContainerRequest{app("x", 1, 15001, 0)}}, opts); r == nil {
		t.Error("fits above what is left after Add")
	}
}

func TestRank(t *testing.T) {
	big := func(usedMiB ...int64) Node {
		var gs []CommittedGPU
		for i := range 8 {
			gs = append(gs, gpu(i, "A100", 40960, 0))
		}
		n := node(gs...)
		for i, m := range usedMiB {
			n.GPUs[i].Used = podmodel.Usage{MemMiB: m, Cores: 10, Slots: 1}
		}
		return n
	}
	idle, little, more := big(), big(1000), big(1000, 2000)
	full := Fullness(big(40960, 40960, 40960, 40960, 40960, 40960, 40960, 40960))
	if full != 1_000_000 {
		t.Errorf("fullness of a full node %d, want 1000000", full)
	}
	// What GPUs hold beyond their bookings fills a node as bookings do.
	holding := big(1000)
	holding.GPUs[1].Held = 2000
	if Fullness(holding) != Fullness(more) {
		t.Errorf("fullness with 2000 MiB held %d, want that of 2000 MiB booked, %d", Fullness(holding), Fullness(more))
	}
	fullness := []int64{Fullness(idle), Fullness(little), Fullness(more)}
	if !slices.IsSorted(fullness) || fullness[0] != 0 || fullness[0] == fullness[1] {
		t.Fatalf("fullness %v, want idle < little < more", fullness)
	}
	for _, tc := range []struct {
		policy string
		want   []int64
	}{
		{podmodel.Binpack, []int64{0, 3, 10}},
		{podmodel.Spread, []int64{10, 7, 0}},
	} {
		if got := Rank(fullness, tc.policy); !slices.Equal(got, tc.want) {
			t.Errorf("%s: scores %v for fullness %v, want %v", tc.policy, got, fullness, tc.want)
		}
	}
	if got := Rank([]int64{5, 5}, podmodel.Binpack); !slices.Equal(got, []int64{10, 10}) {
		t.Errorf("equal nodes scored %v, want 10 each", got)
	}
	if got := Rank(nil, podmodel.Spread); len(got) != 0 {
		t.Errorf("no nodes scored %v", got)
	}
}

func TestSummarize(t *testing.T) {
	reasons := map[string]Reason{
		"n3": {Kind: "no matching gpu", Text: "x; 8 GPU(s) excluded"},
		"n1": {Kind: "insufficient gpumem", Text: "container \"c\" needs 1 GPU(s) with 10000 MiB; largest free 6000 MiB < 10000"},
		"n2": {Kind: "insufficient gpumem", Text: "y; largest free 2000 MiB < 10000"},
	}
	got := Summarize(12, 0, reasons)
	want := "0/12 nodes fit: 2 insufficient gpumem (largest free 6000 MiB < 10000), 1 no matching gpu (8 GPU(s) excluded)"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// Fits runs per node of every /filter: on an ordinary node it must not
// allocate, with or without type selectors.
func TestFitsDoesNotAllocate(t *testing.T) {
	var gs []CommittedGPU
	for i := range 8 {
		gs = append(gs, gpu(i, "NVIDIA A100-SXM4-40GB", 40960, i/4))
	}
	n := node(gs...)
	n.Features = protocol.UnderstoodFeatures()
	n.Sets = []Set{{Link: protocol.LinkNVLink, Mask: 0xff}, {Link: protocol.LinkPCIeSwitch, Mask: 0x3}, {Link: protocol.LinkPCIeSwitch, Mask: 0xc}}
	n.GPUs[2].Used = podmodel.Usage{MemMiB: 30000, Cores: 50, Slots: 3}
	n.GPUs[3].Held = 20000
	n.GPUs[5].Full = true
	twoByTwo := []podmodel.ContainerRequest{app("a", 2, 1000, 10), app("b", 2, 1000, 10)}
	for name, req := range map[string]Request{
		"plain":      {Containers: []podmodel.ContainerRequest{app("c", 2, 10000, 20)}},
		"numa first": {Containers: twoByTwo, GPUPolicy: podmodel.GPUPolicy{Load: podmodel.Binpack, NUMA: podmodel.NUMAFirst}},
		"numa-bind":  {Containers: twoByTwo, SingleNUMA: true},
		"numa after": {Containers: twoByTwo, GPUPolicy: podmodel.GPUPolicy{Load: podmodel.Spread, NUMA: podmodel.NUMATiebreak}},
		"mutex":      {Containers: twoByTwo, GPUPolicy: podmodel.GPUPolicy{Load: podmodel.Spread, Mutex: true}},
		"topology":   {Containers: twoByTwo, GPUPolicy: podmodel.GPUPolicy{Load: podmodel.Binpack, Topology: true}, SingleNUMA: true},
		"selectors":  {Containers: []podmodel.ContainerRequest{app("c", 1, 1000, 0)}, UseTypes: []string{" a100 "}, NoUseTypes: []string{"h100"}},
	} {
		if r := Fits(n, req, opts); r != nil {
			t.Fatalf("%s: does not fit: %+v", name, r)
		}
		if allocs := testing.AllocsPerRun(100, func() { _ = Fits(n, req, opts) }); allocs != 0 {
			t.Errorf("%s: Fits allocates %.0f times per call", name, allocs)
		}
	}
}

func TestContainsFold(t *testing.T) {
	for _, tc := range []struct {
		s, sub string
		want   bool
	}{
		{"NVIDIA A100-SXM4-40GB", "a100", true},
		{"NVIDIA A100-SXM4-40GB", "SXM4-40gb", true},
		{"NVIDIA L4", "l40", false},
		{"L4", "NVIDIA L4", false},
		{"NVIDIA L4", "", true},
	} {
		if got := containsFold(tc.s, tc.sub); got != tc.want {
			t.Errorf("containsFold(%q, %q) = %v, want %v", tc.s, tc.sub, got, tc.want)
		}
	}
}

// Fits takes shortcuts Fit cannot (it stops at enough candidates, skips
// the choice for the last container): on random nodes and pods the two
// must still agree on whether, and why not, a pod fits.
func TestFitsAgreesWithPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := []podmodel.ContainerKind{podmodel.KindApp, podmodel.KindInit, podmodel.KindSidecar}
	fits := 0
	const rounds = 3000
	for round := range rounds {
		var gs []CommittedGPU
		for i := range 1 + rng.IntN(8) {
			g := gpu(i, []string{"NVIDIA A100", "NVIDIA L4"}[rng.IntN(2)], 1000*int64(1+rng.IntN(40)), rng.IntN(2))
			g.Healthy = rng.IntN(10) > 0
			if rng.IntN(2) == 0 {
				g.Used = podmodel.Usage{MemMiB: int64(rng.IntN(int(g.MemoryMiB))), Cores: rng.IntN(101), Slots: rng.IntN(11), Exclusive: rng.IntN(20) == 0}
			}
			if rng.IntN(4) == 0 {
				g.Held, g.Full = int64(rng.IntN(int(g.MemoryMiB))), rng.IntN(10) == 0
			}
			gs = append(gs, g)
		}
		n := node(gs...)
		var req Request
		for c := range 1 + rng.IntN(3) {
			cr := app(fmt.Sprintf("c%d", c), rng.IntN(4), int64(rng.IntN(20000)), []int{0, 10, 30, 100}[rng.IntN(4)])
			cr.Kind = kinds[rng.IntN(len(kinds))]
			req.Containers = append(req.Containers, cr)
		}
		if rng.IntN(4) == 0 {
			req.UseTypes = []string{"l4"}
		}
		req.SingleNUMA = rng.IntN(4) == 0
		req.GPUPolicy = podmodel.GPUPolicy{Load: []string{podmodel.Binpack, podmodel.Spread}[rng.IntN(2)], NUMA: podmodel.NUMAOrder(rng.IntN(3))}
		_, full := Place(n, req, opts)
		quick := Fits(n, req, opts)
		if (full == nil) != (quick == nil) || (full != nil && *full != *quick) {
			t.Fatalf("round %d: Fit says %+v, Fits %+v\nnode %+v\nrequest %+v", round, full, quick, n, req)
		}
		if full == nil {
			fits++
		}
	}
	if fits < rounds/10 || fits > rounds*9/10 {
		t.Fatalf("%d of %d random pods fit: too one-sided to compare the two", fits, rounds)
	}
	t.Logf("%d of %d random pods fit", fits, rounds)
}

// A container that names no gpucores gets the default: a slot's share of
// the GPU it lands on, or the setting's percentage; never 0, which its
// interposer would read as every core. split such containers fit a GPU.
func TestDefaultCores(t *testing.T) {
	for _, tc := range []struct {
		name  string
		split int
		opts  Options
		want  int // cores each gets
		fits  int // how many fit one GPU
	}{
		{"a slot's share at split 10", 10, Options{DefaultMemPercent: 1}, 10, 10},
		{"a slot's share at split 3", 3, Options{DefaultMemPercent: 1}, 33, 3},
		{"the setting", 10, Options{DefaultMemPercent: 1, DefaultCores: 30}, 30, 3},
		// A default never holds a GPU whole: at split 1 the one slot
		// gets 99 cores, not every core.
		{"split 1 is one slot, not exclusive", 1, Options{DefaultMemPercent: 1}, 99, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := gpu(0, "A100", 40000, 0)
			g.Split = tc.split
			n := node(g)
			req := Request{Containers: []podmodel.ContainerRequest{app("c", 1, 0, 0)}}
			placed := 0
			for {
				pl, r := Place(n, req, tc.opts)
				if r != nil {
					break
				}
				if got := pl[0].GPUs[0].Cores; got != tc.want {
					t.Fatalf("cores %d, want %d", got, tc.want)
				}
				Add(&n, pl)
				placed++
			}
			if placed != tc.fits {
				t.Fatalf("%d fit, want %d", placed, tc.fits)
			}
		})
	}
}

// An init container and an app container that name no gpucores share a
// split-1 GPU, as they did before defaults: the init one exits first.
func TestDefaultCoresLeaveASplitOneGPUShareable(t *testing.T) {
	g := gpu(0, "A100", 40000, 0)
	g.Split = 1
	init := app("init", 1, 1000, 0)
	init.Kind = podmodel.KindInit
	if _, r := Place(node(g), Request{Containers: []podmodel.ContainerRequest{init, app("main", 1, 1000, 0)}}, opts); r != nil {
		t.Fatalf("init and app containers do not share a split-1 GPU: %+v", r)
	}
}
