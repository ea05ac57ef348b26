package gpu

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// UtilSample is one GPU's live use as NVML reports it: what the processes on
// it use, whatever vgpud booked for them.
type UtilSample struct {
	UUID               string
	UtilizationPercent uint32 // of the last sample period, the SMs busy
	MemoryUsedMiB      uint64
	MemoryTotalMiB     uint64
}

// Samples reads every GPU's utilisation and memory in use. A GPU that
// does not answer is left out: its health (an XID, a failing query)
// says why.
func Samples(lib nvml.Interface) []UtilSample {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil
	}
	out := make([]UtilSample, 0, n)
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		util, ret := d.GetUtilizationRates()
		if ret != nvml.SUCCESS {
			continue
		}
		mem, ret := d.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			continue
		}
		out = append(out, UtilSample{UUID: uuid, UtilizationPercent: util.Gpu, MemoryUsedMiB: mem.Used >> 20, MemoryTotalMiB: mem.Total >> 20})
	}
	return out
}
