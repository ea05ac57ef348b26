package usage

import (
	"maps"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpud/vgpud/node/internal/gpu"
)

// NVMLSampler reads lib's processes for each sample, with devs' physical
// memory. It keeps the driver's SM-sample timestamp between calls, so one
// enforcer calls it at a time. made, if not nil, is each MIG device made
// since devs were discovered, by UUID, with its GPU.
func NVMLSampler(lib nvml.Interface, devs []gpu.Device, made func() map[string]string) Sampler {
	totals := make(map[string]uint64, len(devs))
	parents := map[string]string{}
	for _, d := range devs {
		totals[d.UUID] = uint64(d.MemoryMiB) << 20
		if d.MIG != nil {
			for _, in := range d.MIG.Instances {
				parents[in.UUID] = d.UUID
			}
		}
	}
	var since uint64
	return func() (Sample, error) {
		procs, newest, err := gpu.Processes(lib, since)
		since = newest
		ps := parents
		if made != nil {
			if m := made(); len(m) > 0 {
				ps = maps.Clone(parents)
				maps.Copy(ps, m)
			}
		}
		s := Sample{Processes: make([]Process, len(procs)), MemoryBytes: totals, Parents: ps}
		for i, p := range procs {
			s.Processes[i] = Process{GPU: p.GPU, PID: p.PID, UsedBytes: p.UsedBytes, SMPercent: p.SMPercent}
		}
		return s, err
	}
}
