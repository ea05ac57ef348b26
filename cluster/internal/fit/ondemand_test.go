package fit

import (
	"slices"
	"testing"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// h100OnDemand is a node with one H100 80GB in MIG mode whose node makes
// instances on demand: every profile at every placement its driver
// lists (as read from driver 580.159.04), those named in made made.
func h100OnDemand(t *testing.T, made ...string) Node {
	t.Helper()
	m := protocol.MIGGPU{UUID: "GPU-h100", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, SMs: 132, Healthy: true, Instances: []protocol.MIGInstance{}}
	for _, p := range []struct {
		name   string
		mib    int64
		sms    int
		size   int
		starts []int
	}{
		{"1g.10gb", 9984, 16, 1, []int{0, 1, 2, 3, 4, 5, 6}},
		{"1g.20gb", 20096, 26, 2, []int{0, 2, 4, 6}},
		{"2g.20gb", 20096, 32, 2, []int{0, 2, 4}},
		{"3g.40gb", 40448, 60, 4, []int{0, 4}},
		{"4g.40gb", 40448, 64, 4, []int{0}},
		{"7g.80gb", 81152, 132, 8, []int{0}},
	} {
		for _, s := range p.starts {
			in := protocol.MIGInstance{UUID: protocol.OnDemandID(m.UUID, p.name, s), Profile: p.name, MemoryMiB: p.mib, SMs: p.sms, Start: s, Size: p.size}
			if slices.Contains(made, in.UUID) {
				in.Made = "MIG-made-" + in.Profile
			}
			m.Possible = append(m.Possible, in)
		}
	}
	inv := protocol.Inventory{Version: protocol.Version, GPUs: []protocol.GPU{}, MIG: []protocol.MIGGPU{m}}
	raw, err := protocol.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	if inv, err = protocol.DecodeInventory(raw); err != nil {
		t.Fatal(err)
	}
	gpus, refs := inv.Bookable()
	n := Node{Name: "n1", Features: protocol.UnderstoodFeatures()}
	for _, g := range gpus {
		n.GPUs = append(n.GPUs, CommittedGPU{GPU: g, MIG: refs[g.UUID]})
	}
	BlockMade(&n)
	return n
}

func onDemand(profile string, start int) string {
	return protocol.OnDemandID("GPU-h100", profile, start)
}

// The leader takes the smallest possible instance that holds the
// request at a placement nothing booked or made overlaps, and books it
// for the node to make.
func TestOnDemandPlacement(t *testing.T) {
	mig := func(c podmodel.ContainerRequest) Request {
		return Request{Containers: []podmodel.ContainerRequest{c}, Mode: podmodel.ModeMIG}
	}
	for _, tc := range []struct {
		name   string
		made   []string
		booked []string // possible instances held by other pods
		c      podmodel.ContainerRequest
		want   string
	}{
		{"the smallest that holds the memory, at the end of the slots", nil, nil, app("c", 1, 9000, 0), onDemand("1g.10gb", 6)},
		{"15000 MiB: 1g.20gb, fewer SMs than 2g.20gb", nil, nil, app("c", 1, 15000, 0), onDemand("1g.20gb", 6)},
		{"cores as a share of 132 SMs: 40 % needs 53; at 4, leaving 4g.40gb room", nil, nil, app("c", 1, 1000, 40), onDemand("3g.40gb", 4)},
		{"a profile by name", nil, nil, profile("c", "4g.40gb"), onDemand("4g.40gb", 0)},
		{"beside a booked 1g.10gb at 0, where nothing more is blocked", nil, []string{onDemand("1g.10gb", 0)}, app("c", 1, 9000, 0), onDemand("1g.10gb", 1)},
		{"a booked 3g.40gb at 0 leaves 4..7", nil, []string{onDemand("3g.40gb", 0)}, app("c", 1, 9000, 0), onDemand("1g.10gb", 6)},
		{"two 3g.40gb booked: no room for 1g.10gb", nil, []string{onDemand("3g.40gb", 0), onDemand("3g.40gb", 4)}, app("c", 1, 9000, 0), "no room for a MIG instance"},
		{"7g.80gb made, unbooked: taken again as it is", []string{onDemand("7g.80gb", 0)}, nil, app("c", 1, 9000, 0), onDemand("7g.80gb", 0)},
		{"7g.80gb made and booked: nothing", []string{onDemand("7g.80gb", 0)}, []string{onDemand("7g.80gb", 0)}, app("c", 1, 9000, 0), "no room for a MIG instance"},
		{"a made 1g.10gb at 6 blocks 1g.20gb at 6", []string{onDemand("1g.10gb", 6)}, []string{onDemand("1g.20gb", 0), onDemand("1g.20gb", 2), onDemand("1g.20gb", 4)}, profile("c", "1g.20gb"), "no room for a MIG instance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := h100OnDemand(t, tc.made...)
			for _, u := range tc.booked {
				Add(&n, podmodel.Placement{{Name: "other", GPUs: []protocol.GPUSlice{{UUID: u, MemoryMiB: 1, Cores: 1, MIG: true, Make: true}}}})
			}
			pl, r := Place(n, mig(tc.c), opts)
			if got := picked(pl, r); got != tc.want {
				t.Fatalf("got %s, want %s (reason %+v)", got, tc.want, r)
			}
			if (Fits(n, mig(tc.c), opts) == nil) != (r == nil) {
				t.Errorf("Fits and Place disagree")
			}
			if r != nil {
				return
			}
			if s := pl[0].GPUs[0]; !s.MIG || !s.Make {
				t.Errorf("slice %+v: want MIG and make", s)
			}
			a := protocol.Assignment{Node: "n1", Containers: []protocol.ContainerAssignment{{Name: "c", GPUs: pl[0].GPUs}}}
			raw, err := protocol.EncodeAssignment(a)
			if err != nil {
				t.Fatal(err)
			}
			if back, _ := protocol.DecodeAssignment(raw); !slices.Contains(back.Requires, protocol.FeatureMIGOnDemand) {
				t.Errorf("assignment requires %v, want %s", back.Requires, protocol.FeatureMIGOnDemand)
			}
		})
	}
}

// Two containers of one pod each get an instance, never overlapping.
func TestOnDemandOwnContainersDoNotOverlap(t *testing.T) {
	n := h100OnDemand(t)
	req := Request{Containers: []podmodel.ContainerRequest{app("a", 1, 30000, 0), app("b", 1, 30000, 0)}, Mode: podmodel.ModeMIG}
	pl, r := Place(n, req, opts)
	if r != nil {
		t.Fatal(r.Text)
	}
	a, b := n.GPUs[n.index(pl[0].GPUs[0].UUID)].MIG, n.GPUs[n.index(pl[1].GPUs[0].UUID)].MIG
	if a.Overlaps(b) {
		t.Errorf("the pod's containers got %s and %s, which overlap", pl[0].GPUs[0].UUID, pl[1].GPUs[0].UUID)
	}
	// A third of 30000 MiB does not fit beside them: 3g.40gb twice fills
	// the GPU.
	req.Containers = append(req.Containers, app("c", 1, 30000, 0))
	if _, r := Place(n, req, opts); r == nil {
		t.Error("three 3g.40gb placed on one H100")
	}
}

// A pod cannot choose where an instance is made by naming it: the
// selectors match only the GPU of a possible instance.
func TestOnDemandSelectorsNameTheGPU(t *testing.T) {
	n := h100OnDemand(t)
	req := Request{Containers: []podmodel.ContainerRequest{app("c", 1, 15000, 0)}, Mode: podmodel.ModeMIG, UseUUIDs: []string{onDemand("1g.20gb", 6)}}
	if _, r := Place(n, req, opts); r == nil || r.Kind != "no matching gpu" {
		t.Errorf("use-gpuuuid of a possible instance: %+v, want no matching gpu", r)
	}
	req.UseUUIDs = []string{"GPU-h100"}
	if pl, r := Place(n, req, opts); r != nil || pl[0].GPUs[0].UUID != onDemand("1g.20gb", 6) {
		t.Errorf("use-gpuuuid of the GPU: %v %+v, want 1g.20gb at 6", pl, r)
	}
}

// Where on the GPU a small instance is made leaves the larger ones room:
// seven 1g.10gb pods one after another, then a 4g.40gb still fits
// beside three of them, which first-free placement (0, 1, 2 ...) would
// have taken from it.
func TestOnDemandPlacementLeavesRoom(t *testing.T) {
	n := h100OnDemand(t)
	mig := func(c podmodel.ContainerRequest) Request {
		return Request{Containers: []podmodel.ContainerRequest{c}, Mode: podmodel.ModeMIG}
	}
	var at []string
	for range 3 {
		pl, r := Place(n, mig(app("c", 1, 9000, 0)), opts)
		if r != nil {
			t.Fatal(r.Text)
		}
		at = append(at, pl[0].GPUs[0].UUID)
		Add(&n, pl)
	}
	if _, r := Place(n, mig(profile("c", "4g.40gb")), opts); r != nil {
		t.Errorf("after 1g.10gb at %v, no 4g.40gb: %s", at, r.Text)
	}
}
