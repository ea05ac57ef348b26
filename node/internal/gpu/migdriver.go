package gpu

import (
	"maps"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
)

// driverProfile is one GPU instance profile as a driver reported it.
type driverProfile struct {
	slices, count, sms uint32
	mib                uint64
	placements         []nvml.GpuInstancePlacement
}

// at is placements of size at each start.
func at(size uint32, starts ...uint32) []nvml.GpuInstancePlacement {
	out := make([]nvml.GpuInstancePlacement, len(starts))
	for i, s := range starts {
		out[i] = nvml.GpuInstancePlacement{Start: s, Size: size}
	}
	return out
}

// h100Driver is the H100 80GB HBM3 with the GPU instance profiles its
// driver reported (580.159.04, read by TestMIGProfilesOnNVML on
// 2026-11-27 with MIG mode off). go-nvml's preset is simplified: 7
// memory slots where the driver places on 8 (3g.40gb at 0+4 and 4+4,
// 7g.80gb at 0+8, 1g.20gb on 2 slots), whole-GB memory and fewer SMs.
// The geometry differs: two 3g.40gb leave no room for a 1g.10gb here,
// one in go-nvml's.
func h100Driver() gpus.Config {
	return fromDriver(gpus.H100_SXM5_80GB, map[int]driverProfile{
		nvml.GPU_INSTANCE_PROFILE_1_SLICE:      {1, 7, 16, 9984, at(1, 0, 1, 2, 3, 4, 5, 6)},
		nvml.GPU_INSTANCE_PROFILE_2_SLICE:      {2, 3, 32, 20096, at(2, 0, 2, 4)},
		nvml.GPU_INSTANCE_PROFILE_3_SLICE:      {3, 2, 60, 40448, at(4, 0, 4)},
		nvml.GPU_INSTANCE_PROFILE_4_SLICE:      {4, 1, 64, 40448, at(4, 0)},
		nvml.GPU_INSTANCE_PROFILE_7_SLICE:      {7, 1, 132, 81152, at(8, 0)},
		nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: {1, 1, 16, 9984, at(1, 0, 1, 2, 3, 4, 5, 6)},
		nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: {1, 4, 26, 20096, at(2, 0, 2, 4, 6)},
	})
}

// h200Driver is the H200 (143771 MiB) with the profiles its driver
// reported (580.159.04, the same day, MIG mode off): the H100's
// geometry with more memory per slice, where go-nvml's preset has 7
// slots, whole-GB memory and 48 and 112 SMs for 3g.71gb and 7g.141gb.
func h200Driver() gpus.Config {
	return fromDriver(gpus.H200_SXM5_141GB, map[int]driverProfile{
		nvml.GPU_INSTANCE_PROFILE_1_SLICE:      {1, 7, 16, 16384, at(1, 0, 1, 2, 3, 4, 5, 6)},
		nvml.GPU_INSTANCE_PROFILE_2_SLICE:      {2, 3, 32, 33280, at(2, 0, 2, 4)},
		nvml.GPU_INSTANCE_PROFILE_3_SLICE:      {3, 2, 60, 71424, at(4, 0, 4)},
		nvml.GPU_INSTANCE_PROFILE_4_SLICE:      {4, 1, 64, 71424, at(4, 0)},
		nvml.GPU_INSTANCE_PROFILE_7_SLICE:      {7, 1, 132, 143360, at(8, 0)},
		nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: {1, 1, 16, 16384, at(1, 0, 1, 2, 3, 4, 5, 6)},
		nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: {1, 4, 26, 33280, at(2, 0, 2, 4, 6)},
	})
}

// fromDriver is c with the GPU instance profiles read from its driver.
// Compute instances smaller than their GPU instance, which vgpud does
// not offer, keep go-nvml's numbers; a whole one takes its GPU
// instance's SMs.
func fromDriver(c gpus.Config, read map[int]driverProfile) gpus.Config {
	src := c.MIGProfiles
	p := gpus.MIGProfileConfig{
		GpuInstanceProfiles:       map[int]nvml.GpuInstanceProfileInfo{},
		ComputeInstanceProfiles:   map[int]map[int]nvml.ComputeInstanceProfileInfo{},
		GpuInstancePlacements:     map[int][]nvml.GpuInstancePlacement{},
		ComputeInstancePlacements: src.ComputeInstancePlacements,
	}
	for id, r := range read {
		gi := src.GpuInstanceProfiles[id]
		gi.SliceCount, gi.InstanceCount, gi.MultiprocessorCount, gi.MemorySizeMB = r.slices, r.count, r.sms, r.mib
		p.GpuInstanceProfiles[id] = gi
		p.GpuInstancePlacements[id] = r.placements
		cis := maps.Clone(src.ComputeInstanceProfiles[id])
		for ciID, ci := range cis {
			if ci.SliceCount == r.slices {
				ci.MultiprocessorCount = r.sms
				cis[ciID] = ci
			}
		}
		p.ComputeInstanceProfiles[id] = cis
	}
	c.MIGProfiles = p
	return c
}
