package podmodel

import (
	"testing"

	"github.com/vgpud/vgpud/protocol"
)

// One rule for what a pod holds, read three ways: per GPU from a placement
// (the books and `vgpud inspect`), and summed over GPUs from the requests
// (quota).
func TestFootprintRule(t *testing.T) {
	two := []string{"GPU-0", "GPU-1"}
	slice := func(uuid string, mem int64, cores int) protocol.GPUSlice {
		return protocol.GPUSlice{UUID: uuid, MemoryMiB: mem, Cores: cores}
	}
	ctr := func(name string, k ContainerKind, gpus ...protocol.GPUSlice) ContainerPlacement {
		return ContainerPlacement{Name: name, Kind: k, GPUs: gpus}
	}
	for _, tc := range []struct {
		name string
		pl   Placement
		want []Usage // per GPU
		// what the same containers ask, summed over GPUs, for quota
		reqs      []ContainerRequest
		wantTotal Usage
	}{
		{
			name:      "init only: held while it runs",
			pl:        Placement{ctr("init", KindInit, slice("GPU-0", 30000, 20))},
			want:      []Usage{{MemMiB: 30000, Cores: 20, Slots: 1}, {}},
			reqs:      []ContainerRequest{{Name: "init", Kind: KindInit, GPUs: 1, MemoryMiB: 30000, Cores: 20}},
			wantTotal: Usage{MemMiB: 30000, Cores: 20, Slots: 1},
		},
		{
			name: "init + apps: the larger of the init and the apps' sum",
			pl: Placement{
				ctr("init", KindInit, slice("GPU-0", 30000, 10)),
				ctr("a", KindApp, slice("GPU-0", 20000, 30)),
				ctr("b", KindApp, slice("GPU-0", 5000, 0)),
			},
			want: []Usage{{MemMiB: 30000, Cores: 30, Slots: 2}, {}},
			reqs: []ContainerRequest{
				{Name: "init", Kind: KindInit, GPUs: 1, MemoryMiB: 30000, Cores: 10},
				{Name: "a", GPUs: 1, MemoryMiB: 20000, Cores: 30},
				{Name: "b", GPUs: 1, MemoryMiB: 5000},
			},
			wantTotal: Usage{MemMiB: 30000, Cores: 30, Slots: 2},
		},
		{
			name: "sidecar: held for the pod's life, on top of the apps",
			pl: Placement{
				ctr("proxy", KindSidecar, slice("GPU-0", 4000, 10)),
				ctr("a", KindApp, slice("GPU-0", 20000, 30)),
			},
			want: []Usage{{MemMiB: 24000, Cores: 40, Slots: 2}, {}},
			reqs: []ContainerRequest{
				{Name: "proxy", Kind: KindSidecar, GPUs: 1, MemoryMiB: 4000, Cores: 10},
				{Name: "a", GPUs: 1, MemoryMiB: 20000, Cores: 30},
			},
			wantTotal: Usage{MemMiB: 24000, Cores: 40, Slots: 2},
		},
		{
			name: "an init container after a sidecar runs beside it, one before it does not",
			pl: Placement{
				ctr("first", KindInit, slice("GPU-0", 30000, 0)),
				ctr("proxy", KindSidecar, slice("GPU-0", 4000, 0)),
				ctr("second", KindInit, slice("GPU-0", 28000, 0)),
				ctr("a", KindApp, slice("GPU-0", 1000, 0)),
			},
			want: []Usage{{MemMiB: 32000, Cores: 0, Slots: 2}, {}},
			reqs: []ContainerRequest{
				{Name: "first", Kind: KindInit, GPUs: 1, MemoryMiB: 30000},
				{Name: "proxy", Kind: KindSidecar, GPUs: 1, MemoryMiB: 4000},
				{Name: "second", Kind: KindInit, GPUs: 1, MemoryMiB: 28000},
				{Name: "a", GPUs: 1, MemoryMiB: 1000},
			},
			wantTotal: Usage{MemMiB: 32000, Cores: 0, Slots: 2},
		},
		{
			name: "multi-GPU: each GPU carries its own peak; quota counts per GPU times the count",
			pl: Placement{
				ctr("init", KindInit, slice("GPU-0", 10000, 0), slice("GPU-1", 10000, 0)),
				ctr("a", KindApp, slice("GPU-0", 8000, 50), slice("GPU-1", 8000, 50)),
				ctr("b", KindApp, slice("GPU-1", 6000, 20)),
			},
			want: []Usage{{MemMiB: 10000, Cores: 50, Slots: 1}, {MemMiB: 14000, Cores: 70, Slots: 2}},
			reqs: []ContainerRequest{
				{Name: "init", Kind: KindInit, GPUs: 2, MemoryMiB: 10000},
				{Name: "a", GPUs: 2, MemoryMiB: 8000, Cores: 50},
				{Name: "b", GPUs: 1, MemoryMiB: 6000, Cores: 20},
			},
			wantTotal: Usage{MemMiB: 22000, Cores: 120, Slots: 3},
		},
		{
			name:      "a slice on a GPU the node no longer has is ignored",
			pl:        Placement{ctr("a", KindApp, slice("GPU-9", 8000, 0), slice("GPU-1", 1000, 100))},
			want:      []Usage{{}, {MemMiB: 1000, Cores: 100, Slots: 1, Exclusive: true}},
			reqs:      []ContainerRequest{{Name: "a", GPUs: 2, MemoryMiB: 8000}},
			wantTotal: Usage{MemMiB: 16000, Slots: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.pl.Footprint(two)
			for i := range tc.want {
				if got[i] != tc.want[i] {
					t.Errorf("GPU %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
			if total := Requested(tc.reqs, 0, false); total != tc.wantTotal {
				t.Errorf("Requested = %+v, want %+v", total, tc.wantTotal)
			}
		})
	}
}

// The books rebuild a placement from the assignment and the pod's spec;
// the kinds must survive the trip.
func TestPlacementOf(t *testing.T) {
	a := protocol.Assignment{Version: protocol.Version, Node: "n1", Containers: []protocol.ContainerAssignment{
		{Name: "proxy", GPUs: []protocol.GPUSlice{{UUID: "GPU-0", MemoryMiB: 1, Cores: 0}}},
		{Name: "main", GPUs: []protocol.GPUSlice{{UUID: "GPU-0", MemoryMiB: 2, Cores: 0}}},
		{Name: "gone", GPUs: []protocol.GPUSlice{{UUID: "GPU-0", MemoryMiB: 3, Cores: 0}}},
	}}
	pl := PlacementOf(a, map[string]ContainerKind{"proxy": KindSidecar, "main": KindApp})
	if len(pl) != 3 || pl[0].Kind != KindSidecar || pl[1].Kind != KindApp || pl[2].Kind != KindApp {
		t.Fatalf("placement %+v", pl)
	}
}

// A mutex pod's request counts, before its GPUs are chosen, at least as
// many whole GPUs (memory and cores) as its largest container asks: its
// containers may share them.
func TestRequestedMutex(t *testing.T) {
	reqs := []ContainerRequest{
		{Name: "init", Kind: KindInit, GPUs: 1, MemoryMiB: 1000, Cores: 20},
		{Name: "a", GPUs: 2, MemoryMiB: 8000, Cores: 30},
	}
	if got, want := Requested(reqs, 40000, true), (Usage{MemMiB: 80000, Cores: 200, Slots: 2, Exclusive: true, Mutex: true}); got != want {
		t.Errorf("mutex: %+v, want %+v", got, want)
	}
	two := []ContainerRequest{{Name: "a", GPUs: 1, MemoryMiB: 1000}, {Name: "b", GPUs: 1, MemoryMiB: 1000}}
	if got, want := Requested(two, 40000, true), (Usage{MemMiB: 40000, Cores: 100, Slots: 2, Exclusive: true, Mutex: true}); got != want {
		t.Errorf("mutex: %+v, want %+v", got, want)
	}
	if got, want := Requested(reqs, 40000, false), (Usage{MemMiB: 16000, Cores: 60, Slots: 2}); got != want {
		t.Errorf("shared: %+v, want %+v", got, want)
	}
}

// A container with all of each GPU's memory is charged every core,
// whatever gpucores it names: nobody else can use the GPU.
func TestRequestedAllTheMemoryIsEveryCore(t *testing.T) {
	reqs := []ContainerRequest{{Name: "a", GPUs: 2, MemoryPercent: 100, Cores: 1}}
	if got, want := Requested(reqs, 40000, false), (Usage{MemMiB: 80000, Cores: 200, Slots: 2}); got != want {
		t.Errorf("all the memory: %+v, want %+v", got, want)
	}
	half := []ContainerRequest{{Name: "a", GPUs: 1, MemoryPercent: 50, Cores: 1}}
	if got, want := Requested(half, 40000, false), (Usage{Cores: 1, Slots: 1}); got != want {
		t.Errorf("half the memory: %+v, want %+v", got, want)
	}
}
