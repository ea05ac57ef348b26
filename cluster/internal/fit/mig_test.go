package fit

import (
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// instance is a MIG instance of a 40 GB A100 (98 SMs), index 1.
func instance(uuid, profile string, mem int64, cores int) CommittedGPU {
	return CommittedGPU{
		GPU: protocol.GPU{UUID: uuid, Index: 1, Model: "A100-SXM4-40GB MIG " + profile, MemoryMiB: mem, Cores: cores, Split: 1, Healthy: true},
		MIG: &protocol.MIGRef{GPU: "GPU-A100", GPUMemoryMiB: 40960, Profile: profile},
	}
}

// migNode has a shared T4 (index 0) and an A100 in MIG mode: 3g.20gb,
// 2g.10gb and 1g.5gb, listed largest first.
func migNode() Node {
	return node(gpu(0, "Tesla T4", 15360, 0),
		instance("MIG-3g", "3g.20gb", 19968, 43), instance("MIG-2g", "2g.10gb", 9856, 29), instance("MIG-1g", "1g.5gb", 4864, 15))
}

func TestMIGPlacement(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode podmodel.GPUMode
		c    podmodel.ContainerRequest
		used []string // instances already held
		want string   // picked UUIDs or the reason's kind
	}{
		{"no mode takes a shared slice", podmodel.ModeAny, app("c", 1, 4000, 0), nil, "GPU-0"},
		{"no mode never takes an instance, though one would hold it", podmodel.ModeAny, app("c", 1, 16000, 0), nil, "insufficient gpumem"},
		{"mig: the smallest instance", podmodel.ModeMIG, app("c", 1, 4000, 0), nil, "MIG-1g"},
		{"mig: 5000 MiB is more than 1g.5gb's 4864", podmodel.ModeMIG, app("c", 1, 5000, 0), nil, "MIG-2g"},
		{"mig: cores as a share of the parent's SMs", podmodel.ModeMIG, app("c", 1, 1000, 30), nil, "MIG-3g"},
		{"mig: memory percent of the parent", podmodel.ModeMIG, podmodel.ContainerRequest{Name: "c", GPUs: 1, HasGPUs: true, MemoryPercent: 20}, nil, "MIG-2g"},
		{"mig: no memory named asks the whole GPU", podmodel.ModeMIG, podmodel.ContainerRequest{Name: "c", GPUs: 1, HasGPUs: true}, nil, "insufficient gpumem"},
		{"mig: a held instance is passed over", podmodel.ModeMIG, app("c", 1, 4000, 0), []string{"MIG-1g"}, "MIG-2g"},
		{"mig: all held", podmodel.ModeMIG, app("c", 1, 100, 0), []string{"MIG-1g", "MIG-2g", "MIG-3g"}, "gpu in exclusive use"},
		{"mig: two GPUs in one container never", podmodel.ModeMIG, app("c", 2, 1000, 0), nil, "no gpu of the asked mode"},
		{"shared never takes an instance", podmodel.ModeShared, app("c", 1, 16000, 0), nil, "insufficient gpumem"},
		{"nouse-gpuuuid of the MIG GPU excludes its instances", podmodel.ModeMIG, app("c", 1, 4000, 0), nil, "no gpu of the asked mode"},
		{"no mode, two GPUs: only shared GPUs count", podmodel.ModeAny, app("c", 2, 1000, 0), nil, "no gpu of the asked mode"},
		{"profile: that profile, though a smaller one is free", podmodel.ModeMIG, profile("c", "2g.10gb"), nil, "MIG-2g"},
		{"profile: the largest, asked by name", podmodel.ModeMIG, profile("c", "3g.20gb"), nil, "MIG-3g"},
		{"profile: held, no other profile instead", podmodel.ModeMIG, profile("c", "2g.10gb"), []string{"MIG-2g"}, "no free instance of the profile"},
		{"profile: none of it on the node", podmodel.ModeMIG, profile("c", "7g.40gb"), nil, "no free instance of the profile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := migNode()
			for _, u := range tc.used {
				n.GPUs[n.index(u)].Used = podmodel.Usage{MemMiB: 1, Cores: 1, Slots: 1}
			}
			req := Request{Containers: []podmodel.ContainerRequest{tc.c}, Mode: tc.mode}
			if strings.HasPrefix(tc.name, "nouse-gpuuuid") {
				req.NoUseUUIDs = []string{"gpu-a100"}
			}
			pl, r := Place(n, req, opts)
			if got := picked(pl, r); got != tc.want {
				t.Fatalf("got %s, want %s (reason %+v)", got, tc.want, r)
			}
			if req.NoUseUUIDs != nil && !strings.Contains(r.Text, "3 excluded by use/nouse-gputype") {
				t.Errorf("reason %q does not name the instances the selector excluded", r.Text)
			}
			if (Fits(n, req, opts) == nil) != (r == nil) {
				t.Errorf("Fits and Place disagree")
			}
			if r != nil || pl[0].GPUs[0].UUID == "GPU-0" {
				return
			}
			s := pl[0].GPUs[0]
			g := n.GPUs[n.index(s.UUID)]
			if !s.MIG || s.Exclusive || s.MemoryMiB != g.MemoryMiB || s.Cores != g.GPU.Cores {
				t.Errorf("slice %+v: want the whole instance, MIG, charged its memory and SM share", s)
			}
			// Booked, the instance takes nobody else.
			Add(&n, pl)
			if r := Fits(n, Request{Containers: []podmodel.ContainerRequest{app("d", 1, 1, 0)}, Mode: podmodel.ModeMIG, UseUUIDs: []string{s.UUID}}, opts); r == nil {
				t.Error("a booked instance took a second pod")
			}
		})
	}
}

func profile(name, p string) podmodel.ContainerRequest {
	return podmodel.ContainerRequest{Name: name, GPUs: 1, MIGProfile: p}
}

func TestMIGSliceRequiresItsFeature(t *testing.T) {
	pl, r := Place(migNode(), Request{Containers: []podmodel.ContainerRequest{app("c", 1, 4000, 0)}, Mode: podmodel.ModeMIG}, opts)
	if r != nil {
		t.Fatal(r)
	}
	raw, err := protocol.EncodeAssignment(pl.Assignment("n1"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := protocol.DecodeAssignment(raw)
	if err != nil || len(a.Requires) != 1 || a.Requires[0] != protocol.FeatureMIG || !a.HasMIG() {
		t.Errorf("assignment %s: %+v, %v; want it to require %s", raw, a, err, protocol.FeatureMIG)
	}
}
