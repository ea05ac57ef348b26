package fit

import (
	"slices"
	"testing"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// resident holds mem MiB and 10 cores of one GPU at priority prio.
func resident(key string, prio int32, uuid string, mem int64) Resident {
	return Resident{Key: key, Priority: prio, Placement: podmodel.Placement{{Name: "main", GPUs: []protocol.GPUSlice{{UUID: uuid, MemoryMiB: mem, Cores: 10}}}}}
}

func TestPreempt(t *testing.T) {
	bare := node(gpu(0, "A100", 10000, 0), gpu(1, "A100", 10000, 0))
	one := func(mem int64) Request {
		return Request{Containers: []podmodel.ContainerRequest{app("main", 1, mem, 10)}}
	}
	// Both GPUs full by memory with two pods each: slots are free, so
	// kube-scheduler alone would see room and propose no victim.
	full := []Resident{
		resident("a1", 0, "GPU-0", 6000), resident("a2", 0, "GPU-0", 3000),
		resident("b1", 15, "GPU-1", 8000), resident("b2", 0, "GPU-1", 1000),
	}
	for _, tc := range []struct {
		name      string
		residents []Resident
		must      []string
		prio      int32
		req       Request
		want      []string // nil: none
	}{
		{"one GPU's worth empties one GPU", full, nil, 10, one(8000), []string{"a1", "a2"}},
		{"the fewest victims win", append(slices.Clone(full[:2]), resident("b1", 0, "GPU-1", 8500), resident("b2", 0, "GPU-1", 1000)), nil, 10, one(8000), []string{"b1"}},
		{"then the lower priority", []Resident{resident("a1", 3, "GPU-0", 9000), resident("b1", 2, "GPU-1", 9000)}, nil, 10, one(8000), []string{"b1"}},
		{"never one of equal or higher priority", []Resident{resident("x", 5, "GPU-0", 9000), resident("y", 5, "GPU-1", 9000)}, nil, 5, one(8000), nil},
		{"nothing helps a pod bigger than a GPU", full, nil, 10, one(20000), nil},
		{"nothing helps where the lower priorities hold too little", full, nil, 10, Request{Containers: []podmodel.ContainerRequest{app("main", 2, 9500, 10)}}, nil},
		{"a pod that fits evicts nothing", full[:1], nil, 10, one(3000), []string{}},
		{"kube-scheduler's victims stay, and vgpud adds what its rules need", full, []string{"b2"}, 10, one(9000), []string{"b2", "a1", "a2"}},
		{"kube-scheduler's victims alone, where they are enough", full, []string{"a1"}, 10, one(6500), []string{"a1"}},
		{"kube-scheduler's victim of higher priority is refused", full, []string{"b1"}, 10, one(9000), nil},
		{"two GPUs empty both", full, nil, 20, Request{Containers: []podmodel.ContainerRequest{app("main", 2, 9500, 10)}}, []string{"a1", "a2", "b2", "b1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Preempt(bare, tc.residents, tc.must, tc.prio, tc.req, Options{})
			if ok != (tc.want != nil) || (ok && !sameSet(got.Victims, tc.want)) {
				t.Fatalf("Preempt = %v, %v; want %v", got, ok, tc.want)
			}
			// The victims freed let it fit; none is of prio or higher.
			if ok {
				removed := map[string]bool{}
				for _, v := range got.Victims {
					removed[v] = true
				}
				if r := Fits(without(bare, tc.residents, removed), tc.req, Options{}); r != nil {
					t.Errorf("with %v gone the pod still does not fit: %v", got.Victims, r)
				}
				if got.Highest >= tc.prio {
					t.Errorf("a victim of priority %d for a pod of %d", got.Highest, tc.prio)
				}
			}
		})
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// without is bare with every resident booked but removed's, by Add: the
// books' own count, against which Preempt's tally is checked.
func without(bare Node, residents []Resident, removed map[string]bool) Node {
	n := bare
	n.GPUs = slices.Clone(bare.GPUs)
	for _, r := range residents {
		if !removed[r.Key] {
			Add(&n, r.Placement)
		}
	}
	return n
}

// The tally agrees with the books' count, resident by resident removed
// and restored, exclusive and mutex slices included.
func TestTallyIsTheBooksCount(t *testing.T) {
	bare := node(gpu(0, "A100", 10000, 0), gpu(1, "A100", 10000, 0))
	res := []Resident{resident("a", 0, "GPU-0", 3000), resident("b", 0, "GPU-1", 2000),
		{Key: "x", Placement: podmodel.Placement{{Name: "m", GPUs: []protocol.GPUSlice{{UUID: "GPU-0", MemoryMiB: 1000, Cores: 100}}}}},
		{Key: "m", Placement: podmodel.Placement{{Name: "m", GPUs: []protocol.GPUSlice{{UUID: "GPU-1", MemoryMiB: 500, Cores: 10, Exclusive: true}}}}}}
	tl := newTally(bare, res)
	removed := map[string]bool{}
	for _, order := range [][]int{{2}, {3}, {0, 2}, {1, 3}} {
		for _, i := range order {
			tl.remove(i)
			removed[res[i].Key] = true
		}
		got, want := tl.node(), without(bare, res, removed)
		for g := range want.GPUs {
			if got.GPUs[g].Used != want.GPUs[g].Used {
				t.Errorf("removed %v, GPU %d: tally %+v, books %+v", removed, g, got.GPUs[g].Used, want.GPUs[g].Used)
			}
		}
		for _, i := range order {
			tl.restore(i)
			delete(removed, res[i].Key)
		}
	}
}
