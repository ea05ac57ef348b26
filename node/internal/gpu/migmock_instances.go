package gpu

import (
	"crypto/sha256"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// wire answers the GPU instance's NVML calls.
func (gi *mockGI) wire() {
	g := gi.gpu
	h := gi.handle
	h.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if gi.destroyed {
			return nvml.GpuInstanceInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return gi.info, nvml.SUCCESS
	}
	h.GetComputeInstanceProfileInfoFunc = func(id, eng int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
		p, ok := g.profiles.ComputeInstanceProfiles[int(gi.profile.Id)][id]
		if !ok || eng != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return p, nvml.SUCCESS
	}
	h.CreateComputeInstanceFunc = func(p *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		ci, ret := gi.createCI(p)
		g.tell()
		return ci, ret
	}
	h.GetComputeInstancesFunc = func(p *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if gi.ci != nil && gi.ci.profile.Id == p.Id {
			return []nvml.ComputeInstance{gi.ci.handle}, nvml.SUCCESS
		}
		return nil, nvml.SUCCESS
	}
	h.GetComputeInstanceByIdFunc = func(id int) (nvml.ComputeInstance, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if gi.ci != nil && int(gi.ci.info.Id) == id {
			return gi.ci.handle, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	h.DestroyFunc = func() nvml.Return {
		defer g.tell()
		g.mu.Lock()
		defer g.mu.Unlock()
		switch {
		case gi.destroyed:
			return nvml.ERROR_INVALID_ARGUMENT
		case gi.ci != nil:
			return nvml.ERROR_IN_USE // the driver's answer while a compute instance is there
		}
		gi.destroyed = true
		g.gis = slices.DeleteFunc(g.gis, func(o *mockGI) bool { return o == gi })
		return nvml.SUCCESS
	}
}

// createCI makes the GPU instance's compute instance: one, of a profile
// the GPU instance offers.
func (gi *mockGI) createCI(p *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
	g := gi.gpu
	g.mu.Lock()
	defer g.mu.Unlock()
	known, ok := g.profiles.ComputeInstanceProfiles[int(gi.profile.Id)][int(p.Id)]
	switch {
	case gi.destroyed:
		return nil, nvml.ERROR_INVALID_ARGUMENT
	case !ok:
		return nil, nvml.ERROR_NOT_SUPPORTED
	case gi.ci != nil:
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	ci := &mockCI{handle: &mock.ComputeInstance{}, profile: known}
	ci.info = nvml.ComputeInstanceInfo{Device: g.parent, GpuInstance: gi.handle, Id: 0, ProfileId: known.Id}
	ci.device = gi.migDevice(ci)
	ci.handle.GetInfoFunc = func() (nvml.ComputeInstanceInfo, nvml.Return) { return ci.info, nvml.SUCCESS }
	ci.handle.DestroyFunc = func() nvml.Return {
		defer g.tell()
		if uuid, _ := ci.device.GetUUID(); len(g.running(uuid)) > 0 {
			return nvml.ERROR_IN_USE // the driver's answer while processes run on it
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if gi.ci != ci {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		gi.ci = nil
		return nvml.SUCCESS
	}
	gi.ci = ci
	return ci.handle, nvml.SUCCESS
}

// migDevice is the MIG device of gi's compute instance ci. Its UUID
// depends on the parent and the placement only, so a restarted mock
// that makes the same instances names them the same.
func (gi *mockGI) migDevice(ci *mockCI) *mock.Device {
	g := gi.gpu
	h := sha256.Sum256([]byte(fmt.Sprintf("vgpud-mock-mig/%s/%d/%d/%d", g.uuid, gi.profile.Id, gi.info.Placement.Start, ci.profile.Id)))
	uuid := fmt.Sprintf("MIG-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
	giID, ciID := int(gi.info.Id), int(ci.info.Id)
	mem := uint64(gi.profile.MemorySizeMB) << 20
	return &mock.Device{
		IsMigDeviceHandleFunc: func() (bool, nvml.Return) { return true, nvml.SUCCESS },
		GetUUIDFunc:           func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetNameFunc:           func() (string, nvml.Return) { return g.parent.Config.Name, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: mem, Free: mem}, nvml.SUCCESS
		},
		GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
			return nvml.DeviceAttributes{
				MultiprocessorCount:       ci.profile.MultiprocessorCount,
				GpuInstanceSliceCount:     gi.profile.SliceCount,
				ComputeInstanceSliceCount: ci.profile.SliceCount,
				MemorySizeMB:              gi.profile.MemorySizeMB,
			}, nvml.SUCCESS
		},
		GetGpuInstanceIdFunc:                   func() (int, nvml.Return) { return giID, nvml.SUCCESS },
		GetComputeInstanceIdFunc:               func() (int, nvml.Return) { return ciID, nvml.SUCCESS },
		GetDeviceHandleFromMigDeviceHandleFunc: func() (nvml.Device, nvml.Return) { return g.parent, nvml.SUCCESS },
		// The processes Mock.SetProcess declared on it, compute ones.
		GetComputeRunningProcessesFunc:    func() ([]nvml.ProcessInfo, nvml.Return) { return g.running(uuid), nvml.SUCCESS },
		GetGraphicsRunningProcessesFunc:   func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
		GetMPSComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
	}
}
