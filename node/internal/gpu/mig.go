package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpud/vgpud/protocol/mig"
)

// MIG is a GPU's MIG state when MIG mode is on: it then serves
// containers only through its instances.
type MIG struct {
	// SMs are the multiprocessors of the GPU's largest profile: what the
	// whole GPU gives its instances.
	SMs       int
	Instances []MIGDevice
	// Skipped says which MIG devices are not offered, and why: one NVML
	// or go-nvlib cannot describe, and compute instances that split a GPU
	// instance, which would share its memory (vgpud holds an instance
	// whole).
	Skipped []string
	// Devices are the UUIDs of every MIG device NVML listed, offered or
	// not: what Layout compares.
	Devices []string
	// Taken are the placements of every GPU instance on the GPU, offered
	// or not (split into compute instances, or with none): what no
	// instance made on demand may overlap.
	Taken []mig.Span
}

// MIGDevice is one MIG device: a GPU instance and its compute instance.
type MIGDevice struct {
	UUID      string
	Profile   string // NVIDIA's name, e.g. 1g.10gb, as go-nvlib renders it
	MemoryMiB int64
	SMs       int
	// GI and CI are the GPU and compute instance IDs under the parent.
	GI, CI int
	// Start and Size are the GPU instance's placement in memory slices.
	Start, Size int
	// whole: the compute instance takes all of its GPU instance's slices.
	whole bool
}

// migOf reads the MIG state of d, whose MIG mode is on (list asks).
func migOf(lib nvml.Interface, d nvml.Device) (*MIG, error) {
	out := &MIG{}
	for id := 0; id < nvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
		if p, ret := d.GetGpuInstanceProfileInfo(id); ret == nvml.SUCCESS {
			out.SMs = max(out.SMs, int(p.MultiprocessorCount))
		}
	}
	out.Taken, _ = gpuInstances(d) // what could be read: the rescan sees the rest
	handles, err := migDevices(d)
	if err != nil {
		return nil, err
	}
	names := nvdev.New(lib, nvdev.WithVerifySymbols(false))
	for i, h := range handles {
		if h == nil {
			continue
		}
		if uuid, ret := h.GetUUID(); ret == nvml.SUCCESS {
			out.Devices = append(out.Devices, uuid)
		}
		in, err := describeMIG(d, h, names)
		if err != nil {
			out.Skipped = append(out.Skipped, fmt.Sprintf("MIG device %d: %v", i, err))
			continue
		}
		out.Instances = append(out.Instances, in)
	}
	out.Instances = wholeOnly(out.Instances, &out.Skipped)
	for _, in := range out.Instances {
		out.SMs = max(out.SMs, in.SMs) // no profile answered: at least its instances
	}
	return out, nil
}

// wholeOnly keeps the MIG devices that are a whole GPU instance: a GPU
// instance split into several compute instances lists each as a device
// with the GPU instance's memory and placement, and booking each whole
// would book that memory twice.
func wholeOnly(ins []MIGDevice, skipped *[]string) []MIGDevice {
	perGI := map[int]int{}
	for _, in := range ins {
		perGI[in.GI]++
	}
	out := ins[:0]
	for _, in := range ins {
		if perGI[in.GI] > 1 || !in.whole {
			*skipped = append(*skipped, fmt.Sprintf("%s (%s): a compute instance of part of GPU instance %d; vgpud offers only whole GPU instances", in.UUID, in.Profile, in.GI))
			continue
		}
		out = append(out, in)
	}
	return out
}

func describeMIG(parent, h nvml.Device, names nvdev.Interface) (MIGDevice, error) {
	uuid, ret := h.GetUUID()
	if ret != nvml.SUCCESS {
		return MIGDevice{}, fmt.Errorf("uuid: %s", nvml.ErrorString(ret))
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return MIGDevice{}, fmt.Errorf("%s: memory: %s", uuid, nvml.ErrorString(ret))
	}
	attrs, ret := h.GetAttributes()
	if ret != nvml.SUCCESS {
		return MIGDevice{}, fmt.Errorf("%s: attributes: %s", uuid, nvml.ErrorString(ret))
	}
	gi, ret := h.GetGpuInstanceId()
	if ret != nvml.SUCCESS {
		return MIGDevice{}, fmt.Errorf("%s: GPU instance id: %s", uuid, nvml.ErrorString(ret))
	}
	ci, ret := h.GetComputeInstanceId()
	if ret != nvml.SUCCESS {
		return MIGDevice{}, fmt.Errorf("%s: compute instance id: %s", uuid, nvml.ErrorString(ret))
	}
	giHandle, ret := parent.GetGpuInstanceById(gi)
	if ret != nvml.SUCCESS {
		return MIGDevice{}, fmt.Errorf("%s: GPU instance %d: %s", uuid, gi, nvml.ErrorString(ret))
	}
	info, ret := giHandle.GetInfo()
	if ret != nvml.SUCCESS {
		return MIGDevice{}, fmt.Errorf("%s: GPU instance %d info: %s", uuid, gi, nvml.ErrorString(ret))
	}
	md, err := names.NewMigDevice(h)
	if err != nil {
		return MIGDevice{}, fmt.Errorf("%s: %w", uuid, err)
	}
	profile, err := md.GetProfile()
	if err != nil {
		return MIGDevice{}, fmt.Errorf("%s: profile: %w", uuid, err)
	}
	return MIGDevice{
		UUID: uuid, Profile: profile.String(), MemoryMiB: int64(mem.Total >> 20), SMs: int(attrs.MultiprocessorCount),
		GI: gi, CI: ci, Start: int(info.Placement.Start), Size: int(info.Placement.Size),
		whole: attrs.ComputeInstanceSliceCount >= attrs.GpuInstanceSliceCount,
	}, nil
}

// Own says what the node made itself (on demand), which the rescan does
// not take for a change: its MIG devices, and its GPU instances by
// placement, made whole or not.
type Own interface {
	IsOurs(uuid string) bool
	OwnsAt(gpu string, at mig.Span) bool
}

// LayoutOf is the MIG layout of devs as discovered: each GPU in MIG mode,
// its MIG devices and its GPU instances' placements, but those own made.
// The rescan compares it with Layout, since creating or destroying an
// instance changes nothing in sysfs. The placements catch a GPU instance
// made without a compute instance: no MIG device shows it, yet it takes
// room an instance made on demand would need.
func LayoutOf(devs []Device, own Own) string {
	var b strings.Builder
	for _, d := range devs {
		if d.MIG == nil {
			continue
		}
		layoutLine(&b, d.UUID, slices.DeleteFunc(slices.Clone(d.MIG.Devices), own.IsOurs), others(d.UUID, d.MIG.Taken, own))
	}
	return b.String()
}

// others are the placements of taken that own did not make.
func others(gpu string, taken []mig.Span, own Own) []mig.Span {
	return slices.DeleteFunc(slices.Clone(taken), func(at mig.Span) bool { return own.OwnsAt(gpu, at) })
}

// Layout reads the MIG layout of the served GPUs (devs, as discovered:
// those excluded are not compared) from NVML now, in LayoutOf's form; ok
// is false when a query failed, which says nothing about a change (a
// lost GPU is the health watcher's to report).
func Layout(lib nvml.Interface, devs []Device, own Own) (layout string, ok bool) {
	served := make(map[string]bool, len(devs))
	for _, d := range devs {
		served[d.UUID] = true
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return "", false
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			return "", false
		}
		if !served[uuid] {
			continue
		}
		mode, _, ret := d.GetMigMode()
		switch {
		case ret == nvml.ERROR_NOT_SUPPORTED || (ret == nvml.SUCCESS && mode != nvml.DEVICE_MIG_ENABLE):
			continue
		case ret != nvml.SUCCESS:
			return "", false // a failed read is no change
		}
		handles, err := migDevices(d)
		if err != nil {
			return "", false
		}
		var ids []string
		for _, h := range handles {
			if h == nil {
				continue
			}
			if id, ret := h.GetUUID(); ret == nvml.SUCCESS && !own.IsOurs(id) {
				ids = append(ids, id)
			}
		}
		taken, err := gpuInstances(d)
		if err != nil {
			return "", false
		}
		layoutLine(&b, uuid, ids, others(uuid, taken, own))
	}
	return b.String(), true
}

// gpuInstances are the placements of every GPU instance on d. A profile
// whose instances the driver will not list (not supported, or not
// permitted) is passed over, each read alike; another failure is an
// error, with what could be read: Layout takes it for no change,
// discovery goes on with what it has (a rescan sees the rest).
func gpuInstances(d nvml.Device) ([]mig.Span, error) {
	var out []mig.Span
	var errs []error
	for id := 0; id < nvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
		p, ret := d.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS {
			continue
		}
		gis, ret := d.GetGpuInstances(&p)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NO_PERMISSION:
			continue
		default:
			errs = append(errs, fmt.Errorf("GPU instances of profile %d: %s", id, nvml.ErrorString(ret)))
			continue
		}
		for _, gi := range gis {
			info, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				errs = append(errs, fmt.Errorf("GPU instance of profile %d: %s", id, nvml.ErrorString(ret)))
				continue
			}
			out = append(out, mig.Span{Start: int(info.Placement.Start), Size: int(info.Placement.Size)})
		}
	}
	return out, errors.Join(errs...)
}

// layoutLine writes one MIG GPU's part of a layout.
func layoutLine(b *strings.Builder, gpu string, ids []string, taken []mig.Span) {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	at := make([]string, len(taken))
	for i, p := range taken {
		at[i] = fmt.Sprintf("%d+%d", p.Start, p.Size)
	}
	slices.Sort(at)
	fmt.Fprintf(b, "%s=%s@%s;", gpu, strings.Join(ids, ","), strings.Join(at, ","))
}

// migDevices are d's MIG device handles by NVML's MIG device index, nil
// where the index holds none.
func migDevices(d nvml.Device) ([]nvml.Device, error) {
	count, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("MIG device count: %s", nvml.ErrorString(ret))
	}
	out := make([]nvml.Device, count)
	for i := range out {
		h, ret := d.GetMigDeviceHandleByIndex(i)
		switch ret {
		case nvml.SUCCESS:
			out[i] = h
		case nvml.ERROR_NOT_FOUND, nvml.ERROR_INVALID_ARGUMENT:
		default:
			return nil, fmt.Errorf("MIG device %d: %s", i, nvml.ErrorString(ret))
		}
	}
	return out, nil
}
