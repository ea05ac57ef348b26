package gpu

import (
	"slices"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/vgpud/vgpud/protocol/mig"
)

// migGPU is one mock GPU's MIG state. go-nvml's mock server carries the
// profiles but creates instances without checking the mode, the
// placement or what is already there, and has no MIG device handles;
// this enforces the geometry as the driver does and gives each compute
// instance a MIG device.
type migGPU struct {
	parent   *server.Device
	profiles gpus.MIGProfileConfig
	uuid     string // the parent's, for the instances' stable UUIDs

	mu      sync.Mutex
	enabled bool
	nextGI  uint32
	gis     []*mockGI // in creation order: NVML's MIG device index order
	// changed, if set, is told after each instance made or destroyed
	// (Mock.KeepMIG), outside mu.
	changed func()
	// procs, if set, are the processes declared on a MIG device by its
	// UUID (Mock.SetProcess); called outside mu.
	procs func(uuid string) []ProcessSample
}

// running are the processes declared on the MIG device uuid.
func (g *migGPU) running(uuid string) []nvml.ProcessInfo {
	if g.procs == nil {
		return nil
	}
	var out []nvml.ProcessInfo
	for _, p := range g.procs(uuid) {
		out = append(out, nvml.ProcessInfo{Pid: uint32(p.PID), UsedGpuMemory: p.UsedBytes})
	}
	return out
}

// devices are the UUIDs of the GPU's MIG devices now.
func (g *migGPU) devices() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, gi := range g.gis {
		if gi.ci != nil {
			if id, _ := gi.ci.device.GetUUID(); id != "" {
				out = append(out, id)
			}
		}
	}
	return out
}

// hasDevice says whether uuid is one of the GPU's MIG devices now.
func (g *migGPU) hasDevice(uuid string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, gi := range g.gis {
		if gi.ci != nil {
			if id, _ := gi.ci.device.GetUUID(); id == uuid {
				return true
			}
		}
	}
	return false
}

// tell calls changed, if set.
func (g *migGPU) tell() {
	g.mu.Lock()
	f := g.changed
	g.mu.Unlock()
	if f != nil {
		f()
	}
}

type mockGI struct {
	gpu       *migGPU
	handle    *mock.GpuInstance
	info      nvml.GpuInstanceInfo
	profile   nvml.GpuInstanceProfileInfo
	ci        *mockCI // at most one: vgpud makes one compute instance per GPU instance
	destroyed bool
}

type mockCI struct {
	handle  *mock.ComputeInstance
	info    nvml.ComputeInstanceInfo
	profile nvml.ComputeInstanceProfileInfo
	device  *mock.Device // the MIG device
}

// maxMIGDevices is NVML's GetMaxMigDeviceCount on the GPUs the mock knows.
const maxMIGDevices = 7

// newMIGGPU makes d answer MIG queries from profiles, with MIG mode
// enabled or not.
func newMIGGPU(d *server.Device, profiles gpus.MIGProfileConfig, enabled bool) *migGPU {
	g := &migGPU{parent: d, profiles: profiles, uuid: d.UUID, enabled: enabled}
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		mode := nvml.DEVICE_MIG_DISABLE
		if g.enabled {
			mode = nvml.DEVICE_MIG_ENABLE
		}
		return mode, mode, nvml.SUCCESS
	}
	// vgpud never changes a GPU's MIG mode; the mock refuses so that a
	// test would see it try.
	d.SetMigModeFunc = func(int) (nvml.Return, nvml.Return) { return nvml.ERROR_NO_PERMISSION, nvml.ERROR_NO_PERMISSION }
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	d.GetGpuInstanceProfileInfoFunc = func(id int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		p, ok := g.profiles.GpuInstanceProfiles[id]
		if !ok {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return p, nvml.SUCCESS
	}
	// The driver lists placements with MIG mode off too (580.159.04 on
	// an H100).
	d.GetGpuInstancePossiblePlacementsFunc = func(p *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		return slices.Clone(g.profiles.GpuInstancePlacements[int(p.Id)]), nvml.SUCCESS
	}
	d.GetGpuInstanceRemainingCapacityFunc = func(p *nvml.GpuInstanceProfileInfo) (int, nvml.Return) {
		return g.remaining(int(p.Id))
	}
	d.CreateGpuInstanceFunc = func(p *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		gi, ret := g.create(int(p.Id), nil)
		g.tell()
		return gi, ret
	}
	d.CreateGpuInstanceWithPlacementFunc = func(p *nvml.GpuInstanceProfileInfo, at *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		gi, ret := g.create(int(p.Id), at)
		g.tell()
		return gi, ret
	}
	d.GetGpuInstancesFunc = func(p *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		var out []nvml.GpuInstance
		for _, gi := range g.gis {
			if gi.profile.Id == p.Id {
				out = append(out, gi.handle)
			}
		}
		return out, nvml.SUCCESS
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, gi := range g.gis {
			if int(gi.info.Id) == id {
				return gi.handle, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return maxMIGDevices, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		n := 0
		for _, gi := range g.gis {
			if gi.ci == nil {
				continue
			}
			if n == i {
				return gi.ci.device, nvml.SUCCESS
			}
			n++
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	return g
}

// taken are the placements of the GPU instances there now; g.mu held.
func (g *migGPU) taken() []mig.Span {
	out := make([]mig.Span, 0, len(g.gis))
	for _, gi := range g.gis {
		out = append(out, mig.Span{Start: int(gi.info.Placement.Start), Size: int(gi.info.Placement.Size)})
	}
	return out
}

func placements(ps []nvml.GpuInstancePlacement) []mig.Span {
	out := make([]mig.Span, len(ps))
	for i, p := range ps {
		out[i] = mig.Span{Start: int(p.Start), Size: int(p.Size)}
	}
	return out
}

// remaining is how many more instances of profile id fit, one after
// another, given those there now.
func (g *migGPU) remaining(id int) (int, nvml.Return) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.profiles.GpuInstanceProfiles[id]
	if !ok {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	if !g.enabled {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	taken, n := g.taken(), 0
	for g.countOf(p.Id)+n < int(p.InstanceCount) {
		at, ok := mig.FirstFree(placements(g.profiles.GpuInstancePlacements[id]), taken)
		if !ok {
			break
		}
		taken = append(taken, at)
		n++
	}
	return n, nvml.SUCCESS
}

func (g *migGPU) countOf(profileID uint32) int {
	n := 0
	for _, gi := range g.gis {
		if gi.profile.Id == profileID {
			n++
		}
	}
	return n
}

// create makes a GPU instance of profile id, at the given placement or the
// first free one, refusing what the driver refuses: MIG mode off, a
// profile the GPU lacks, a placement not among the profile's or one that
// overlaps an instance, more instances than the profile allows.
func (g *migGPU) create(id int, at *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.profiles.GpuInstanceProfiles[id]
	switch {
	case !g.enabled:
		return nil, nvml.ERROR_NOT_SUPPORTED
	case !ok:
		return nil, nvml.ERROR_INVALID_ARGUMENT
	case g.countOf(p.Id) >= int(p.InstanceCount):
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	possible := placements(g.profiles.GpuInstancePlacements[id])
	var where mig.Span
	if at == nil {
		if where, ok = mig.FirstFree(possible, g.taken()); !ok {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
	} else {
		where = mig.Span{Start: int(at.Start), Size: int(at.Size)}
		if !mig.Allowed(where, possible) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if !mig.Free(where, g.taken()) {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
	}
	gi := &mockGI{gpu: g, profile: p, handle: &mock.GpuInstance{}}
	gi.info = nvml.GpuInstanceInfo{Device: g.parent, Id: g.nextGI, ProfileId: p.Id,
		Placement: nvml.GpuInstancePlacement{Start: uint32(where.Start), Size: uint32(where.Size)}}
	g.nextGI++
	gi.wire()
	g.gis = append(g.gis, gi)
	return gi.handle, nvml.SUCCESS
}
