package node

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpud/vgpud/node/internal/nodemetrics"
	"github.com/vgpud/vgpud/node/internal/nrihook"
	"github.com/vgpud/vgpud/node/internal/usage"
	"github.com/vgpud/vgpud/protocol"
)

// NVML lists a MIG instance's processes on its GPU: the usage enforcer
// must find the container's slice there, the whole instance, or it
// would read every MIG process as over a slice of nothing and kill it.
func TestGrantedMIGSliceIsKeptOnItsGPU(t *testing.T) {
	a := &Role{metrics: nodemetrics.New(prometheus.NewRegistry()), containers: usage.NewContainers()}
	a.inv = protocol.Inventory{MIG: []protocol.MIGGPU{{UUID: "GPU-m", Index: 0, MemoryMiB: 40960, SMs: 98,
		Instances: []protocol.MIGInstance{{UUID: "MIG-a", Profile: "1g.5gb", MemoryMiB: 4864, SMs: 14, Size: 1}}}}}
	g := grantedContainers{r: a.containers, a: a}
	g.Granted("ctr", nrihook.Container{Namespace: "ns", Pod: "p", UID: "uid", Name: "c"},
		protocol.ContainerAssignment{Name: "c", GPUs: []protocol.GPUSlice{{UUID: "MIG-a", MemoryMiB: 4864, Cores: 15, MIG: true}}})
	c := a.containers.Get("ctr")
	if c == nil {
		t.Fatal("not registered")
	}
	sl, ok := c.Slices["GPU-m"]
	if !ok || sl.MemoryBytes != 4864<<20 || sl.Cores != 100 {
		t.Errorf("slices %+v; want the instance's 4864 MiB and every core on GPU-m", c.Slices)
	}
	v := usage.Decide(usage.Sample{Processes: []usage.Process{{GPU: "GPU-m", PID: 7, UsedBytes: 4000 << 20, SMPercent: -1}}, MemoryBytes: map[string]uint64{"GPU-m": 40960 << 20}},
		func(int) *usage.Container { return c }, usage.Enforce, 0)
	if len(v.Uses) != 1 || v.Uses[0].Over(0) {
		t.Errorf("uses %+v: a process within its instance read as over", v.Uses)
	}
}
