package gpu

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// migPresets are the GPUs whose MIG profiles go-nvml's mock carries, by
// the model name a fake spec gives them; the H100's and H200's are as
// their drivers report them (h100Driver, h200Driver).
func migPresets() map[string]gpus.Config {
	return map[string]gpus.Config{
		"A100-SXM4-40GB":  gpus.A100_SXM4_40GB,
		"A100-SXM4-80GB":  gpus.A100_SXM4_80GB,
		"A100-PCIE-40GB":  gpus.A100_PCIE_40GB,
		"A100-PCIE-80GB":  gpus.A100_PCIE_80GB,
		"A30-PCIE-24GB":   gpus.A30_PCIE_24GB,
		"H100-SXM5-80GB":  h100Driver(),
		"H200-SXM5-141GB": h200Driver(),
	}
}

// maxFakeInstances bounds a fake GPU's mig= list; the geometry refuses
// more than 7 anyway, with a plainer error here.
const maxFakeInstances = 8

// parseMIG reads a mig= value for a GPU of g.Model with mem MiB.
func (g *FakeGPU) parseMIG(v string, mem uint64) error {
	preset, ok := migPresets()[g.Model]
	if !ok {
		var known []string
		for m := range migPresets() {
			known = append(known, m)
		}
		slices.Sort(known)
		return fmt.Errorf("mig= on model %q, whose MIG profiles the mock does not know; want one of %s", g.Model, strings.Join(known, ", "))
	}
	if mem != preset.MemoryMB {
		return fmt.Errorf("mig= on %s with %d MiB; that GPU has %d", g.Model, mem, preset.MemoryMB)
	}
	g.MIG = []string{}
	if v == "" {
		return nil
	}
	for _, p := range strings.Split(v, "+") {
		if p == "" {
			return fmt.Errorf("mig=%q: an empty profile; want names such as 1g.10gb joined by +", v)
		}
		g.MIG = append(g.MIG, p)
	}
	if len(g.MIG) > maxFakeInstances {
		return fmt.Errorf("mig=%q: %d instances; want at most %d", v, len(g.MIG), maxFakeInstances)
	}
	return nil
}

// setUpMIG gives each of s's GPUs whose config carries MIG profiles its
// MIG state: MIG mode on with the instances of migs[i] where that is not
// nil, else off. A GPU without profiles answers MIG queries as one that
// has no MIG.
func setUpMIG(lib nvml.Interface, s *server.Server, migs [][]string) error {
	names := nvdev.New(lib, nvdev.WithVerifySymbols(false))
	for i, d := range s.Devices {
		md := d.(*server.Device)
		if md.Config.MIGProfiles.GpuInstanceProfiles == nil {
			md.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
			continue
		}
		var want []string
		if i < len(migs) {
			want = migs[i]
		}
		g := newMIGGPU(md, md.Config.MIGProfiles, want != nil)
		if mm, ok := lib.(*Mock); ok {
			mm.migs = append(mm.migs, g)
			g.procs = mm.declared
		}
		for _, name := range want {
			if err := g.make(name, names); err != nil {
				return fmt.Errorf("GPU %d (%s): %w", i, md.Config.Name, err)
			}
		}
	}
	return nil
}

// make creates a GPU and compute instance of the named profile, at the
// first free placement, through the mock's own NVML calls so that the
// geometry is checked.
func (g *migGPU) make(name string, names nvdev.Interface) error {
	var known []string
	// In profile ID order, so that a name two profiles render alike
	// always means the first.
	for _, giID := range slices.Sorted(maps.Keys(g.profiles.GpuInstanceProfiles)) {
		gp := g.profiles.GpuInstanceProfiles[giID]
		for _, ciID := range slices.Sorted(maps.Keys(g.profiles.ComputeInstanceProfiles[giID])) {
			cp := g.profiles.ComputeInstanceProfiles[giID][ciID]
			p, err := names.NewMigProfile(giID, ciID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, uint64(gp.MemorySizeMB), g.parent.MemoryInfo.Total)
			if err != nil {
				continue
			}
			known = append(known, p.String())
			if p.String() != name {
				continue
			}
			gi, ret := g.parent.CreateGpuInstance(&gp)
			if ret != nvml.SUCCESS {
				return fmt.Errorf("MIG %s: create GPU instance: %s", name, nvml.ErrorString(ret))
			}
			if _, ret := gi.CreateComputeInstance(&cp); ret != nvml.SUCCESS {
				gi.Destroy()
				return fmt.Errorf("MIG %s: create compute instance: %s", name, nvml.ErrorString(ret))
			}
			return nil
		}
	}
	slices.Sort(known)
	known = slices.Compact(known)
	return fmt.Errorf("MIG profile %q is not one of this GPU's: %s", name, strings.Join(known, ", "))
}
