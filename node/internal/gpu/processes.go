package gpu

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ProcessSample is one process on one GPU as the driver sees it from
// outside: the memory it holds, and its share of the GPU's SM time.
type ProcessSample struct {
	GPU       string // UUID
	PID       int    // in the host's PID namespace
	UsedBytes uint64
	// SMPercent averages the driver's samples of this process since the
	// last read; -1 where it gave none (an idle process, or a driver that
	// does not sample per process).
	SMPercent int
}

// Processes lists the processes on every GPU with their memory,
// and their SM share from the driver's samples newer than since (its
// timestamp, in µs; 0 for all it keeps). It returns the newest timestamp
// it read, for the next call. A GPU that does not answer is left out
// and named in the error; the others are still listed.
func Processes(lib nvml.Interface, since uint64) ([]ProcessSample, uint64, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, since, fmt.Errorf("count GPUs: %s", nvml.ErrorString(ret))
	}
	var out []ProcessSample
	var errs []error
	newest := since
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("GPU %d: get handle: %s", i, nvml.ErrorString(ret)))
			continue
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("GPU %d: uuid: %s", i, nvml.ErrorString(ret)))
			continue
		}
		procs, err := running(d)
		if err != nil {
			errs = append(errs, fmt.Errorf("GPU %d (%s): list processes: %w", i, uuid, err))
			continue
		}
		sm, last := smShares(d, since)
		newest = max(newest, last)
		for _, pid := range slices.Sorted(maps.Keys(procs)) {
			share, ok := sm[pid]
			if !ok {
				share = -1
			}
			out = append(out, ProcessSample{GPU: uuid, PID: int(pid), UsedBytes: procs[pid], SMPercent: share})
		}
	}
	return out, newest, errors.Join(errs...)
}

// running is every process holding memory on d, by PID: compute (CUDA),
// graphics (Vulkan, GL: an image may ask the NVIDIA runtime for graphics
// capabilities) and MPS clients, each with the most any list gave it.
// Compute must answer; the others are skipped where not supported.
func running(d nvml.Device) (map[uint32]uint64, error) {
	compute, ret := d.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, errors.New(nvml.ErrorString(ret))
	}
	procs := map[uint32]uint64{}
	add := func(list []nvml.ProcessInfo) {
		for _, p := range list {
			used := p.UsedGpuMemory
			if used == math.MaxUint64 { // NVML_VALUE_NOT_AVAILABLE
				used = 0
			}
			procs[p.Pid] = max(procs[p.Pid], used)
		}
	}
	add(compute)
	if graphics, ret := d.GetGraphicsRunningProcesses(); ret == nvml.SUCCESS {
		add(graphics)
	}
	if mps, ret := d.GetMPSComputeRunningProcesses(); ret == nvml.SUCCESS {
		add(mps)
	}
	return procs, nil
}

// smShares averages each process's SM samples newer than since. A GPU
// with no sample since (NOT_FOUND) or none at all (NOT_SUPPORTED) gives
// no shares: the processes' SM shares are then unknown, not 0.
func smShares(d nvml.Device, since uint64) (map[uint32]int, uint64) {
	samples, ret := d.GetProcessUtilization(since)
	if ret != nvml.SUCCESS {
		return nil, since
	}
	sum, count := map[uint32]uint64{}, map[uint32]uint64{}
	newest := since
	for _, s := range samples {
		if s.TimeStamp <= since {
			continue
		}
		sum[s.Pid] += uint64(s.SmUtil)
		count[s.Pid]++
		newest = max(newest, s.TimeStamp)
	}
	out := make(map[uint32]int, len(sum))
	for pid, total := range sum {
		out[pid] = int(total / count[pid])
	}
	return out, newest
}
