package gpu

import (
	"fmt"
	"os"
	"strings"
	"testing"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// TestMIGProfilesOnNVML reads, and never changes, each GPU's MIG mode,
// GPU instance profiles and possible placements from the driver, and
// prints them beside the go-nvml preset the mock backend uses for that
// model: what the mock's geometry is worth on real hardware. Every whole
// instance profile the driver names must be one the scheduler's
// configuration lists, or pods asking it would never reach the extender.
// Needs VGPUD_TEST_NVML=1 (make nvml).
func TestMIGProfilesOnNVML(t *testing.T) {
	if os.Getenv("VGPUD_TEST_NVML") != "1" {
		t.Skip("needs an NVIDIA GPU: VGPUD_TEST_NVML=1 (make nvml)")
	}
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("nvml init: %s", nvml.ErrorString(ret))
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		t.Fatalf("device count: %s", nvml.ErrorString(ret))
	}
	names := nvdev.New(lib, nvdev.WithVerifySymbols(false))
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatalf("device %d: %s", i, nvml.ErrorString(ret))
		}
		model, _ := d.GetName()
		mem, ret := d.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			t.Fatalf("device %d memory: %s", i, nvml.ErrorString(ret))
		}
		cur, pending, ret := d.GetMigMode()
		var b strings.Builder
		fmt.Fprintf(&b, "\nGPU %d %s, %d MiB; MIG mode current %d pending %d (%s)\n", i, model, mem.Total>>20, cur, pending, nvml.ErrorString(ret))
		preset, hasPreset := presetNamed(model)
		fmt.Fprintf(&b, "%-3s %-10s %6s %9s %4s %5s  %-28s %s\n", "id", "profile", "slices", "MiB", "SMs", "count", "driver placements", "mock preset (same id)")
		answered := 0
		for id := 0; id < nvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
			p, ret := d.GetGpuInstanceProfileInfo(id)
			if ret != nvml.SUCCESS {
				if ret != nvml.ERROR_NOT_SUPPORTED && ret != nvml.ERROR_INVALID_ARGUMENT {
					fmt.Fprintf(&b, "%-3d profile info: %s\n", id, nvml.ErrorString(ret))
				}
				continue
			}
			answered++
			name := wholeName(names, id, p.MemorySizeMB, mem.Total)
			places := "-"
			if ps, ret := d.GetGpuInstancePossiblePlacements(&p); ret == nvml.SUCCESS {
				places = placementList(ps)
			} else {
				places = nvml.ErrorString(ret)
			}
			mock := "no preset for this model"
			if hasPreset {
				mock = presetRow(preset, id)
			}
			fmt.Fprintf(&b, "%-3d %-10s %6d %9d %4d %5d  %-28s %s\n", id, name, p.SliceCount, p.MemorySizeMB, p.MultiprocessorCount, p.InstanceCount, places, mock)
			if name != "" && wellknown.ValidMIGProfile(name) && !wellknown.KnownMIGProfile(name) {
				t.Errorf("GPU %d (%s) offers %s, which wellknown.MIGProfiles lacks: the scheduler would never send a pod asking it to the extender", i, model, name)
			}
		}
		if answered == 0 {
			fmt.Fprintf(&b, "the driver answered no GPU instance profile (MIG mode off, or not MIG-capable)\n")
		}
		t.Log(b.String())
	}
}

func presetNamed(model string) (gpus.Config, bool) {
	for _, c := range migPresets() {
		if strings.TrimPrefix(c.Name, "Mock ") == model {
			return c, true
		}
	}
	return gpus.Config{}, false
}

func presetRow(c gpus.Config, id int) string {
	p, ok := c.MIGProfiles.GpuInstanceProfiles[id]
	if !ok {
		return "absent"
	}
	return fmt.Sprintf("%d slices %d MiB %d SMs x%d %s", p.SliceCount, p.MemorySizeMB, p.MultiprocessorCount, p.InstanceCount, placementList(c.MIGProfiles.GpuInstancePlacements[id]))
}

func placementList(ps []nvml.GpuInstancePlacement) string {
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprintf("%d+%d", p.Start, p.Size))
	}
	return strings.Join(s, ",")
}
