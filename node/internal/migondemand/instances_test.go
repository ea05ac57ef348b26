package migondemand

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/inventory"
	"github.com/vgpud/vgpud/node/internal/migmaker"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/mig"
)

// madeOnDemand is a mock H100 in MIG mode, discovered, with the node's
// maker of every whole profile, which has made a 3g.40gb (id) at slot 4
// for pod ns/p/u.
func madeOnDemand(t *testing.T) (nvml.Interface, []gpu.Device, *Instances, string) {
	t.Helper()
	lib, err := gpu.Open("fake:1xH100-SXM5-80GB:81920:mig=", "n1")
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := gpu.Discover(lib)
	parent := devs[0].UUID
	ps, _ := gpu.MIGProfiles(lib, parent)
	m, err := migmaker.Open(filepath.Join(t.TempDir(), "made.json"), migmaker.NVML{Lib: lib}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	od := &Instances{maker: m, catalog: migmaker.Catalog(map[string][]gpu.MIGProfile{parent: ps}, func(string) bool { return true }),
		ours: map[string]bool{}, oursAt: map[string][]mig.Span{}}
	id := protocol.OnDemandID(parent, "3g.40gb", 4)
	if _, err := m.Reconcile(map[string]migmaker.Demand{id: {Slot: od.catalog[id], Pod: "ns/p/u"}}, map[string]string{id: "ns/p/u"}); err != nil {
		t.Fatal(err)
	}
	return lib, devs, od, id
}

// An instance the node made, found at discovery and destroyed since,
// leaves its placement free in the inventory: discovery's list of GPU
// instances is not read again until a rescan.
func TestDestroyedInstanceFreesItsPlacement(t *testing.T) {
	lib, devs, od, _ := madeOnDemand(t)
	m, parent := od.maker, devs[0].UUID
	devs, _ = gpu.Discover(lib) // a start with the instance there
	whole := protocol.OnDemandID(parent, "7g.80gb", 0)
	listed := func() bool {
		inv := inventory.Build(devs, inventory.Scaling{Split: 1, Memory: 1, Cores: 1}, nil, od.State())
		for _, p := range inv.MIG[0].Possible {
			if p.UUID == whole {
				return true
			}
		}
		return false
	}
	if !listed() {
		t.Fatal("7g.80gb not listed beside the instance the node made")
	}
	if _, err := m.Reconcile(nil, nil); err != nil {
		t.Fatal(err)
	}
	if !listed() {
		t.Error("after the destroy, 7g.80gb is not listed: the destroyed instance's placement is still taken")
	}
}

// An instance kept for a process of an ended pod is offered to no pod:
// neither it nor any instance overlapping it is listed.
func TestBusyInstanceIsNotOffered(t *testing.T) {
	lib, devs, od, id := madeOnDemand(t)
	m, parent := od.maker, devs[0].UUID
	listed := func() map[string]bool {
		out := map[string]bool{}
		for _, p := range inventory.Build(devs, inventory.Scaling{Split: 1, Memory: 1, Cores: 1}, nil, od.State()).MIG[0].Possible {
			out[p.UUID] = true
		}
		return out
	}
	overlapping := protocol.OnDemandID(parent, "1g.10gb", 5)
	if l := listed(); !l[id] || !l[overlapping] {
		t.Fatalf("made and held: listed %v; want it, and what overlaps it (the leader blocks those by its Made)", l)
	}
	uuid := m.MadeAll()[id]
	if err := lib.(*gpu.Mock).SetProcess(uuid, os.Getpid(), 100, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reconcile(nil, nil); err != nil { // its pod ended
		t.Fatal(err)
	}
	if l := listed(); l[id] || l[overlapping] || !l[protocol.OnDemandID(parent, "3g.40gb", 0)] {
		t.Errorf("kept for a process: listed %v; want neither it nor what overlaps it, the other half free", l)
	}
	// kubelet's list, set for a generation, keeps them all.
	inv := inventory.Build(devs, inventory.Scaling{Split: 1, Memory: 1, Cores: 1}, nil, od.Advertisable())
	if n := len(inv.MIG[0].Instances) + len(inv.MIG[0].Possible); n != 18 {
		t.Errorf("kubelet is told of %d devices; want all 18 the H100 may make", n)
	}
}
