package dradevices

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// ClaimRequests reads what a DRA claim asks of vgpud's shared GPUs (the
// requests of DeviceClass class), as containers asking the same would:
// count GPUs of the memory and cores it names. A claim that names no
// memory gets a default share of whichever GPU it is given, so it is
// read as all of one, as a container asking every GPU's memory is; one
// of firstAvailable counts each of its vgpud alternatives, since it may
// get any. Quota charges claims by this, as it charges pods by
// podmodel.Requests.
func ClaimRequests(spec *resourceapi.ResourceClaimSpec, class string) ([]podmodel.ContainerRequest, error) {
	var out []podmodel.ContainerRequest
	for _, r := range spec.Devices.Requests {
		exact := []*resourceapi.ExactDeviceRequest{r.Exactly}
		if r.Exactly == nil {
			exact = exact[:0]
			for i := range r.FirstAvailable {
				s := &r.FirstAvailable[i]
				exact = append(exact, &resourceapi.ExactDeviceRequest{DeviceClassName: s.DeviceClassName, AllocationMode: s.AllocationMode, Count: s.Count, Capacity: s.Capacity})
			}
		}
		for _, e := range exact {
			if e == nil || e.DeviceClassName != class {
				continue
			}
			c, err := claimRequest(r.Name, e)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	return out, nil
}

func claimRequest(name string, e *resourceapi.ExactDeviceRequest) (podmodel.ContainerRequest, error) {
	if e.AllocationMode == resourceapi.DeviceAllocationModeAll {
		return podmodel.ContainerRequest{}, fmt.Errorf("request %q asks every device of class %s (allocationMode All), which quota cannot count: ask a count", name, e.DeviceClassName)
	}
	c := podmodel.ContainerRequest{Name: name, Kind: podmodel.KindApp, GPUs: 1, HasGPUs: true}
	if e.Count > 0 {
		c.GPUs = int(min(e.Count, int64(protocol.MaxGPUsPerContainer)))
	}
	c.MemoryPercent = protocol.MaxPercent
	if e.Capacity != nil {
		if q, ok := e.Capacity.Requests[CapacityMemory]; ok {
			c.MemoryMiB = mibUp(q)
			c.MemoryPercent = 0
		}
		if q, ok := e.Capacity.Requests[CapacityCores]; ok {
			c.Cores = int(min(max(q.Value(), 0), protocol.MaxPercent))
		}
	}
	return c, nil
}

// Consumed is what one allocated share takes of a vgpud GPU, as
// kube-scheduler recorded it: memory in whole MiB (rounded up) and
// cores; ok is false where it recorded no consumed capacity (a device
// held whole, such as a MIG instance).
func Consumed(r resourceapi.DeviceRequestAllocationResult) (memMiB int64, cores int, ok bool) {
	if r.ConsumedCapacity == nil {
		return 0, 0, false
	}
	mem, c := r.ConsumedCapacity[CapacityMemory], r.ConsumedCapacity[CapacityCores]
	return mibUp(mem), int(min(max(c.Value(), 0), 1<<20)), true
}

// mibUp is q in whole MiB, rounded up.
func mibUp(q resource.Quantity) int64 { return (q.Value() + 1<<20 - 1) >> 20 }
