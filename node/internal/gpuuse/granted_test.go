package gpuuse

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/nodemetrics"
	"github.com/vgpud/vgpud/node/internal/nrihook"
	"github.com/vgpud/vgpud/node/internal/usage"
	"github.com/vgpud/vgpud/protocol"
)

// NVML lists a MIG instance's processes on its GPU: the usage enforcer
// must find the container's slice there, the whole instance, or it
// would read every MIG process as over a slice of nothing and kill it.
// The hook may grant before the node role has read its GPUs (a
// restart), so the grant needs no inventory: the sample maps it.
func TestGrantedMIGSliceIsFoundOnItsGPU(t *testing.T) {
	w := New("n1", nodemetrics.New(prometheus.NewRegistry()), nil, nil)
	g := w.Granted()
	g.Granted("ctr", nrihook.NamedContainer{Namespace: "ns", Pod: "p", UID: "uid", Name: "c"},
		protocol.ContainerAssignment{Name: "c", GPUs: []protocol.GPUSlice{{UUID: "MIG-a", MemoryMiB: 4864, Cores: 15, MIG: true}}})
	c := w.containers.Get("ctr")
	if c == nil {
		t.Fatal("not registered")
	}
	sample := usage.Sample{Processes: []usage.Process{{GPU: "GPU-m", PID: 7, UsedBytes: 4000 << 20, SMPercent: -1}},
		MemoryBytes: map[string]uint64{"GPU-m": 40960 << 20}, Parents: map[string]string{"MIG-a": "GPU-m"}}
	v := usage.Decide(sample, func(int) *usage.Container { return c }, usage.Rules{Mode: usage.Enforce})
	if len(v.Uses) != 1 || v.Uses[0].Over(0) || v.Uses[0].LimitBytes != 4864<<20 || v.Uses[0].Cores != 100 {
		t.Errorf("uses %+v: want the process within its 4864 MiB instance, every core", v.Uses)
	}
}

// An instance made on demand after the sampler started is found on its
// GPU all the same: the maker's record names its parent.
func TestMadeInstanceSampledOnItsGPU(t *testing.T) {
	lib, err := gpu.Open("fake:1xH100-SXM5-80GB:81920:mig=", "n1")
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := gpu.Discover(lib)
	made := map[string]string{}
	sample := usage.NVMLSampler(lib, devs, func() map[string]string { return made })
	s, err := sample()
	if err != nil || s.Parents["MIG-made"] != "" {
		t.Fatalf("before the make: %+v %v", s.Parents, err)
	}
	made["MIG-made"] = devs[0].UUID
	if s, _ = sample(); s.Parents["MIG-made"] != devs[0].UUID {
		t.Errorf("after the make: parents %v, want MIG-made on %s", s.Parents, devs[0].UUID)
	}
}

// A process of a pod the node granted, listed on a GPU in MIG mode
// where that container holds no instance (one made for a pod that has
// ended, kept by the process), is past a slice of nothing: in enforce it
// is killed, as any process past its slice is (#50 item 7).
func TestKnownPodsProcessOnAKeptInstanceIsEnded(t *testing.T) {
	w := New("n1", nodemetrics.New(prometheus.NewRegistry()), nil, nil)
	g := w.Granted()
	g.Granted("ctr", nrihook.NamedContainer{Namespace: "ns", Pod: "p", UID: "uid", Name: "c"},
		protocol.ContainerAssignment{Name: "c", GPUs: []protocol.GPUSlice{{UUID: "GPU-l4", MemoryMiB: 2000, Cores: 10}}})
	c := w.containers.Get("ctr")
	sample := usage.Sample{Processes: []usage.Process{{GPU: "GPU-h100", PID: 7, UsedBytes: 4000 << 20, SMPercent: -1}},
		MemoryBytes: map[string]uint64{"GPU-h100": 81920 << 20, "GPU-l4": 23034 << 20}, Parents: map[string]string{"MIG-kept": "GPU-h100"}}
	v := usage.Decide(sample, func(int) *usage.Container { return c }, usage.Rules{Mode: usage.Enforce, Margin: 1024 << 20})
	if len(v.Kills) != 1 || v.Kills[0].Victim.PID != 7 || v.Uses[0].LimitBytes != 0 {
		t.Errorf("kills %+v, uses %+v: want process 7 ended, past a slice of nothing on the H100", v.Kills, v.Uses)
	}
	if v.HeldBy["GPU-h100"]["uid"] != 4000<<20 {
		t.Errorf("held by %v; want its 4000 MiB charged to its pod", v.HeldBy)
	}
}

// Two containers the hook granted one claim's share (of two pods that
// use the claim) are one pool: measured together against the claim's
// memory. A share of another claim on the same GPU is apart.
func TestAClaimsShareIsOnePool(t *testing.T) {
	w := New("n1", nodemetrics.New(prometheus.NewRegistry()), nil, nil)
	g := w.Granted()
	slice := protocol.GPUSlice{UUID: "GPU-0", MemoryMiB: 4096, Cores: 30}
	for id, cdi := range map[string]string{"a": "gpu.vgpud.io/claim=c1-0", "b": "gpu.vgpud.io/claim=c1-0", "o": "gpu.vgpud.io/claim=c2-0"} {
		g.Granted(id, nrihook.NamedContainer{Namespace: "ns", Pod: id, UID: "uid-" + id, Name: "main",
			Claimed: []nrihook.ClaimGrant{{CDI: cdi, Claim: "ns/" + cdi[len(cdi)-4:], Share: true, Slice: slice}}},
			protocol.ContainerAssignment{Name: "main", GPUs: []protocol.GPUSlice{slice}})
	}
	owners := map[int]*usage.Container{1: w.containers.Get("a"), 2: w.containers.Get("b"), 3: w.containers.Get("o")}
	sample := usage.Sample{Processes: []usage.Process{{GPU: "GPU-0", PID: 1, UsedBytes: 3000 << 20, SMPercent: -1},
		{GPU: "GPU-0", PID: 2, UsedBytes: 3600 << 20, SMPercent: -1}, {GPU: "GPU-0", PID: 3, UsedBytes: 3600 << 20, SMPercent: -1}},
		MemoryBytes: map[string]uint64{"GPU-0": 81920 << 20}}
	v := usage.Decide(sample, func(pid int) *usage.Container { return owners[pid] }, usage.Rules{Mode: usage.Enforce, Margin: 1024 << 20})
	if len(v.Kills) != 1 || v.Kills[0].Victim.PID != 2 || v.Kills[0].Use.PoolBytes != 6600<<20 || v.Kills[0].Use.Holders != 2 {
		t.Errorf("kills %+v: want b's process 2 ended, the pool holding 6600 MiB in two containers", v.Kills)
	}
}

// Of a pool over its share, its largest holder is the one told (in
// report mode, the one Event): not every holder, nor one holding next
// to nothing.
func TestOnePoolHolderIsTold(t *testing.T) {
	a := &usage.Container{ID: "a"}
	b := &usage.Container{ID: "b"}
	own := &usage.Container{ID: "o"}
	uses := []usage.Use{
		{Container: a, GPU: "GPU-0", Pool: "c1-0", UsedBytes: 10 << 20},
		{Container: b, GPU: "GPU-0", Pool: "c1-0", UsedBytes: 6000 << 20},
		{Container: a, GPU: "GPU-1", Pool: "c1-1", UsedBytes: 5 << 20},
		{Container: own, GPU: "GPU-0", UsedBytes: 1},
	}
	var told []string
	for _, u := range uses {
		if tellsPool(uses, u) {
			told = append(told, u.Container.ID+"/"+u.GPU)
		}
	}
	if strings.Join(told, " ") != "b/GPU-0 a/GPU-1 o/GPU-0" {
		t.Errorf("told %v; want the pool's largest holder on each GPU, and the container of its own slice", told)
	}
}
