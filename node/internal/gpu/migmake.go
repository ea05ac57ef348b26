package gpu

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpud/vgpud/protocol/mig"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// MIGProfile is a GPU instance profile a GPU in MIG mode can make, with
// the placements its driver lists: what a node may make on demand.
type MIGProfile struct {
	ID         int    // NVML's GPU instance profile ID
	Name       string // NVIDIA's name of its whole instance, e.g. 3g.40gb
	MemoryMiB  int64
	SMs        int
	Placements []mig.Span
}

// MIGProfiles reads the whole-instance profiles of the GPU uuid and
// their placements, in profile ID order. Read calls only: the driver
// answers them with MIG mode off too.
func MIGProfiles(lib nvml.Interface, uuid string) ([]MIGProfile, error) {
	d, ret := lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %s: %s", uuid, nvml.ErrorString(ret))
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %s memory: %s", uuid, nvml.ErrorString(ret))
	}
	names := nvdev.New(lib, nvdev.WithVerifySymbols(false))
	var out []MIGProfile
	for id := 0; id < nvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
		p, ret := d.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS {
			continue // NOT_SUPPORTED or INVALID_ARGUMENT: not this GPU's
		}
		name := wholeName(names, id, p.MemorySizeMB, mem.Total)
		if !wellknown.ValidMIGProfile(name) {
			continue
		}
		ps, ret := d.GetGpuInstancePossiblePlacements(&p)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %s profile %s placements: %s", uuid, name, nvml.ErrorString(ret))
		}
		out = append(out, MIGProfile{ID: id, Name: name, MemoryMiB: int64(p.MemorySizeMB), SMs: int(p.MultiprocessorCount), Placements: placements(ps)})
	}
	return out, nil
}

// wholeName is the name of profile id's instance whose compute instance
// takes it whole, e.g. 3g.40gb; "" if go-nvlib names none.
func wholeName(names nvdev.Interface, id int, memMiB, total uint64) string {
	for ci := 0; ci < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; ci++ {
		p, err := names.NewMigProfile(id, ci, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, memMiB, total)
		if err != nil {
			continue
		}
		if info := p.GetInfo(); info.C == info.G {
			return p.String()
		}
	}
	return ""
}

// Made is an instance a node made: its MIG device and the IDs that
// destroy it.
type Made struct {
	UUID   string `json:"uuid"`
	GI, CI int
}

// ErrNoRoom is in the error of a make the GPU had no room for at that
// placement: an instance there, made by someone, is not gone yet.
var ErrNoRoom = errors.New("the placement is taken")

// MakeMIG makes, on GPU parent, a GPU instance of profile at placement
// and one compute instance taking it whole, and returns its MIG device.
// A half-made instance is destroyed before it returns an error.
func MakeMIG(lib nvml.Interface, parent string, profile int, at mig.Span) (Made, error) {
	d, ret := lib.DeviceGetHandleByUUID(parent)
	if ret != nvml.SUCCESS {
		return Made{}, fmt.Errorf("GPU %s: %s", parent, nvml.ErrorString(ret))
	}
	p, ret := d.GetGpuInstanceProfileInfo(profile)
	if ret != nvml.SUCCESS {
		return Made{}, fmt.Errorf("GPU %s profile %d: %s", parent, profile, nvml.ErrorString(ret))
	}
	gi, ret := d.CreateGpuInstanceWithPlacement(&p, &nvml.GpuInstancePlacement{Start: uint32(at.Start), Size: uint32(at.Size)})
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_INSUFFICIENT_RESOURCES:
		return Made{}, fmt.Errorf("GPU %s: GPU instance of profile %d at %d+%d: %w", parent, profile, at.Start, at.Size, ErrNoRoom)
	default:
		return Made{}, fmt.Errorf("GPU %s: GPU instance of profile %d at %d+%d: %s", parent, profile, at.Start, at.Size, nvml.ErrorString(ret))
	}
	info, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		gi.Destroy()
		return Made{}, fmt.Errorf("GPU %s: new GPU instance: %s", parent, nvml.ErrorString(ret))
	}
	ci, err := wholeCompute(gi, p.SliceCount)
	if err != nil {
		gi.Destroy()
		return Made{}, fmt.Errorf("GPU %s GPU instance %d: %w", parent, info.Id, err)
	}
	ciInfo, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		ci.Destroy()
		gi.Destroy()
		return Made{}, fmt.Errorf("GPU %s GPU instance %d: new compute instance: %s", parent, info.Id, nvml.ErrorString(ret))
	}
	m := Made{GI: int(info.Id), CI: int(ciInfo.Id)}
	if m.UUID, err = migUUID(d, m.GI, m.CI); err != nil {
		ci.Destroy()
		gi.Destroy()
		return Made{}, fmt.Errorf("GPU %s: %w", parent, err)
	}
	return m, nil
}

// wholeCompute makes gi's one compute instance, of all its slices.
func wholeCompute(gi nvml.GpuInstance, slices uint32) (nvml.ComputeInstance, error) {
	for id := 0; id < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; id++ {
		p, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS || p.SliceCount != slices {
			continue
		}
		ci, ret := gi.CreateComputeInstance(&p)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("compute instance of %d slices: %s", slices, nvml.ErrorString(ret))
		}
		return ci, nil
	}
	return nil, fmt.Errorf("no compute instance profile of %d slices", slices)
}

// migUUID is the UUID of d's MIG device of GPU instance gi, compute
// instance ci.
func migUUID(d nvml.Device, gi, ci int) (string, error) {
	handles, err := migDevices(d)
	if err != nil {
		return "", err
	}
	for _, h := range handles {
		if h == nil {
			continue
		}
		g, r1 := h.GetGpuInstanceId()
		c, r2 := h.GetComputeInstanceId()
		if r1 == nvml.SUCCESS && r2 == nvml.SUCCESS && g == gi && c == ci {
			if uuid, ret := h.GetUUID(); ret == nvml.SUCCESS {
				return uuid, nil
			}
		}
	}
	return "", fmt.Errorf("no MIG device of GPU instance %d, compute instance %d", gi, ci)
}

// ErrInUse is in the error of a destroy refused while processes run on
// the instance: its pod has ended, but they have not, or are not its.
var ErrInUse = errors.New("processes still run on it")

// DestroyMIG destroys what MakeMIG made on GPU parent (of profile, at
// placement at), only while its MIG device is still m.UUID: IDs are
// reused, and an instance someone else made since under those IDs is
// not vgpud's to destroy. Nor while a process runs on it (ErrInUse): the
// driver would refuse too, and this says which. A GPU instance left
// without its compute instance by a destroy cut short (begun: the
// record says a destroy of m began; its ID, profile and placement m's)
// is destroyed. gone is true when the instance is already not there.
func DestroyMIG(lib nvml.Interface, parent string, profile int, at mig.Span, m Made, begun bool) (gone bool, err error) {
	d, ret := lib.DeviceGetHandleByUUID(parent)
	if ret == nvml.ERROR_NOT_FOUND {
		return true, nil // the GPU is gone, and its instances with it
	}
	if ret != nvml.SUCCESS {
		return false, fmt.Errorf("GPU %s: %s", parent, nvml.ErrorString(ret))
	}
	gi, ret := d.GetGpuInstanceById(m.GI)
	if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
		return true, nil
	}
	if ret != nvml.SUCCESS {
		return false, fmt.Errorf("GPU %s GPU instance %d: %s", parent, m.GI, nvml.ErrorString(ret))
	}
	if uuid, err := migUUID(d, m.GI, m.CI); err != nil || uuid != m.UUID {
		// Not the instance vgpud made, whole: a compute instance of
		// another UUID under those IDs, or none.
		if err == nil || !begun || !halfDestroyed(gi, profile, at) {
			return true, nil
		}
		if err := DestroyHalfMade(lib, parent, m.GI); err != nil {
			return false, err
		}
		return false, nil
	}
	if err := inUse(d, parent, m.UUID); err != nil {
		return false, err
	}
	ci, ret := gi.GetComputeInstanceById(m.CI)
	if ret == nvml.SUCCESS {
		switch ret := ci.Destroy(); ret {
		case nvml.SUCCESS:
		case nvml.ERROR_IN_USE: // a process came since the look above
			return false, fmt.Errorf("GPU %s: destroy compute instance %d of %s: %w", parent, m.CI, m.UUID, ErrInUse)
		default:
			return false, fmt.Errorf("GPU %s: destroy compute instance %d of %s: %s", parent, m.CI, m.UUID, nvml.ErrorString(ret))
		}
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		return false, fmt.Errorf("GPU %s: destroy GPU instance %d of %s: %s", parent, m.GI, m.UUID, nvml.ErrorString(ret))
	}
	return false, nil
}

// halfDestroyed says whether gi is of profile at placement at and has
// no compute instance: what a destroy cut short between the two leaves.
func halfDestroyed(gi nvml.GpuInstance, profile int, at mig.Span) bool {
	info, ret := gi.GetInfo()
	if ret != nvml.SUCCESS || int(info.ProfileId) != profile || int(info.Placement.Start) != at.Start || int(info.Placement.Size) != at.Size {
		return false
	}
	cis, err := computeInstances(gi)
	return err == nil && len(cis) == 0
}

// MIGInUse is an error wrapping ErrInUse, with the PIDs, while NVML
// lists processes on the MIG device m made on GPU parent; nil otherwise.
func MIGInUse(lib nvml.Interface, parent string, m Made) error {
	d, ret := lib.DeviceGetHandleByUUID(parent)
	if ret != nvml.SUCCESS {
		return nil // the driver refuses a destroy in use all the same
	}
	return inUse(d, parent, m.UUID)
}

// inUse is MIGInUse on the GPU's handle d.
func inUse(d nvml.Device, parent, uuid string) error {
	if pids := runningOn(d, uuid); len(pids) > 0 {
		return fmt.Errorf("GPU %s: MIG device %s: %w (PIDs %v)", parent, uuid, ErrInUse, pids)
	}
	return nil
}

// runningOn are the PIDs of the processes NVML lists on d's MIG device
// uuid (running's lists: compute, graphics, MPS clients), sorted. A list
// NVML does not give is taken as empty: the driver itself refuses to
// destroy a compute instance in use.
func runningOn(d nvml.Device, uuid string) []uint32 {
	handles, err := migDevices(d)
	if err != nil {
		return nil
	}
	for _, h := range handles {
		if h == nil {
			continue
		}
		if id, ret := h.GetUUID(); ret != nvml.SUCCESS || id != uuid {
			continue
		}
		procs, err := running(h)
		if err != nil {
			return nil
		}
		return slices.Sorted(maps.Keys(procs)) // said once while the same: the driver's order may vary
	}
	return nil
}

// FindMIG looks on GPU parent for the GPU instance of profile at
// placement at, which a make cut short by a crash may have left: made
// whole (UUID set), or without its compute instance (UUID empty, CI -1).
// One split into several compute instances is not found: vgpud makes
// one per GPU instance.
func FindMIG(lib nvml.Interface, parent string, profile int, at mig.Span) (m Made, found bool, err error) {
	d, ret := lib.DeviceGetHandleByUUID(parent)
	if ret == nvml.ERROR_NOT_FOUND {
		return Made{}, false, nil // the GPU is gone, and its instances with it
	}
	if ret != nvml.SUCCESS {
		return Made{}, false, fmt.Errorf("GPU %s: %s", parent, nvml.ErrorString(ret))
	}
	p, ret := d.GetGpuInstanceProfileInfo(profile)
	if ret != nvml.SUCCESS {
		return Made{}, false, fmt.Errorf("GPU %s profile %d: %s", parent, profile, nvml.ErrorString(ret))
	}
	gis, ret := d.GetGpuInstances(&p)
	if ret != nvml.SUCCESS {
		return Made{}, false, fmt.Errorf("GPU %s instances of profile %d: %s", parent, profile, nvml.ErrorString(ret))
	}
	for _, gi := range gis {
		info, ret := gi.GetInfo()
		if ret != nvml.SUCCESS || int(info.Placement.Start) != at.Start || int(info.Placement.Size) != at.Size {
			continue
		}
		m := Made{GI: int(info.Id), CI: -1}
		cis, err := computeInstances(gi)
		if err != nil {
			return Made{}, false, fmt.Errorf("GPU %s GPU instance %d: %w", parent, info.Id, err)
		}
		switch len(cis) {
		case 0:
		case 1:
			m.CI = cis[0]
			if m.UUID, err = migUUID(d, m.GI, m.CI); err != nil {
				return Made{}, false, fmt.Errorf("GPU %s: %w", parent, err)
			}
		default:
			return Made{}, false, nil // split: vgpud makes one compute instance, so not its
		}
		return m, true, nil
	}
	return Made{}, false, nil
}

// computeInstances are the IDs of gi's compute instances.
func computeInstances(gi nvml.GpuInstance) ([]int, error) {
	var out []int
	for id := 0; id < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; id++ {
		p, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue
		}
		cis, ret := gi.GetComputeInstances(&p)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("compute instances of profile %d: %s", id, nvml.ErrorString(ret))
		}
		for _, ci := range cis {
			if info, ret := ci.GetInfo(); ret == nvml.SUCCESS {
				out = append(out, int(info.Id))
			}
		}
	}
	return out, nil
}

// DestroyHalfMade destroys GPU instance gi on parent if it has no
// compute instance: what MakeMIG leaves when cut short between the two.
func DestroyHalfMade(lib nvml.Interface, parent string, gi int) error {
	d, ret := lib.DeviceGetHandleByUUID(parent)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %s: %s", parent, nvml.ErrorString(ret))
	}
	h, ret := d.GetGpuInstanceById(gi)
	if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
		return nil
	}
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %s GPU instance %d: %s", parent, gi, nvml.ErrorString(ret))
	}
	cis, err := computeInstances(h)
	switch {
	case err != nil:
		return fmt.Errorf("GPU %s GPU instance %d: %w", parent, gi, err)
	case len(cis) > 0:
		return fmt.Errorf("GPU %s GPU instance %d has compute instances now; left alone", parent, gi)
	}
	if ret := h.Destroy(); ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %s: destroy GPU instance %d: %s", parent, gi, nvml.ErrorString(ret))
	}
	return nil
}
