package gpu

import (
	"fmt"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// MIG is a GPU's MIG state when MIG mode is on: it then serves
// containers only through its instances.
type MIG struct {
	// SMs are the multiprocessors of the GPU's largest profile: what the
	// whole GPU gives its instances.
	SMs       int
	Instances []MIGInstance
}

// MIGInstance is one MIG device: a GPU instance and its compute instance.
type MIGInstance struct {
	UUID      string
	Profile   string // NVIDIA's name, e.g. 1g.10gb, as go-nvlib renders it
	MemoryMiB int64
	SMs       int
	// GI and CI are the GPU and compute instance IDs under the parent.
	GI, CI int
	// Start and Size are the GPU instance's placement in memory slices.
	Start, Size int
}

// migOf reads d's MIG state: nil when MIG mode is off or the GPU has
// none (NVML answers NOT_SUPPORTED, or an old driver lacks the call).
func migOf(lib nvml.Interface, d nvml.Device) (*MIG, error) {
	mode, _, ret := d.GetMigMode()
	if ret != nvml.SUCCESS || mode != nvml.DEVICE_MIG_ENABLE {
		return nil, nil
	}
	out := &MIG{}
	for id := 0; id < nvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
		if p, ret := d.GetGpuInstanceProfileInfo(id); ret == nvml.SUCCESS {
			out.SMs = max(out.SMs, int(p.MultiprocessorCount))
		}
	}
	count, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("MIG device count: %s", nvml.ErrorString(ret))
	}
	names := nvdev.New(lib, nvdev.WithVerifySymbols(false))
	for i := 0; i < count; i++ {
		h, ret := d.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d: %s", i, nvml.ErrorString(ret))
		}
		in, err := describeMIG(d, h, names)
		if err != nil {
			return nil, fmt.Errorf("MIG device %d: %w", i, err)
		}
		out.Instances = append(out.Instances, in)
	}
	return out, nil
}

func describeMIG(parent, h nvml.Device, names nvdev.Interface) (MIGInstance, error) {
	uuid, ret := h.GetUUID()
	if ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("uuid: %s", nvml.ErrorString(ret))
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("%s: memory: %s", uuid, nvml.ErrorString(ret))
	}
	attrs, ret := h.GetAttributes()
	if ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("%s: attributes: %s", uuid, nvml.ErrorString(ret))
	}
	gi, ret := h.GetGpuInstanceId()
	if ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("%s: GPU instance id: %s", uuid, nvml.ErrorString(ret))
	}
	ci, ret := h.GetComputeInstanceId()
	if ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("%s: compute instance id: %s", uuid, nvml.ErrorString(ret))
	}
	giHandle, ret := parent.GetGpuInstanceById(gi)
	if ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("%s: GPU instance %d: %s", uuid, gi, nvml.ErrorString(ret))
	}
	info, ret := giHandle.GetInfo()
	if ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("%s: GPU instance %d info: %s", uuid, gi, nvml.ErrorString(ret))
	}
	md, err := names.NewMigDevice(h)
	if err != nil {
		return MIGInstance{}, fmt.Errorf("%s: %w", uuid, err)
	}
	profile, err := md.GetProfile()
	if err != nil {
		return MIGInstance{}, fmt.Errorf("%s: profile: %w", uuid, err)
	}
	return MIGInstance{
		UUID: uuid, Profile: profile.String(), MemoryMiB: int64(mem.Total >> 20), SMs: int(attrs.MultiprocessorCount),
		GI: gi, CI: ci, Start: int(info.Placement.Start), Size: int(info.Placement.Size),
	}, nil
}
