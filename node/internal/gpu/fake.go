package gpu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// FakeGPU is one GPU of a fake machine.
type FakeGPU struct {
	Model     string
	MemoryMiB uint64
	Place
	// MIG, when not nil, puts the GPU in MIG mode with these instances
	// (profile names, made in order at their first free placement); the
	// model must be one whose profiles the mock knows (migPresets).
	MIG []string
}

// Place is where a mock or fake GPU sits: its NUMA node, and the NVLink
// domain and PCIe switch it shares with the GPUs of the same number (-1:
// none). go-nvml's mocks answer no topology query, so these do.
type Place struct {
	NUMA, NVLink, PCIe int
}

// Bounds of a fake machine, so a typo does not build a thousand GPUs.
const (
	maxFakeGPUs   = 64
	maxFakeMemory = 16 << 20
)

// ParseFake reads a fake machine: comma-separated groups of
// <count>x<model>:<MiB>[:numa=<n>][:nvlink=<n>][:pcie=<n>][:mig=<profiles>], e.g.
// "4xA100-80GB:81920:numa=0:nvlink=0,2xT4:15360:numa=1:pcie=3". GPUs
// with the same nvlink number are joined by NVLink; with the same pcie
// number, they sit behind one PCIe switch. mig= puts the GPUs in MIG mode
// with the instances listed, +-separated ("mig=3g.20gb+1g.5gb"; empty:
// none yet); the model is then one of migPresets, with its memory.
func ParseFake(spec string) ([]FakeGPU, error) {
	var out []FakeGPU
	for _, group := range strings.Split(spec, ",") {
		g, n, err := parseFakeGroup(strings.TrimSpace(group))
		if err != nil {
			return nil, fmt.Errorf("fake GPUs %q: %w; want <count>x<model>:<MiB>[:numa=<n>][:nvlink=<n>][:pcie=<n>][:mig=<profile>+...], comma-separated", group, err)
		}
		for range n {
			out = append(out, g)
		}
		if len(out) > maxFakeGPUs {
			return nil, fmt.Errorf("fake machine has more than %d GPUs; want at most %d in all", maxFakeGPUs, maxFakeGPUs)
		}
	}
	return out, nil
}

func parseFakeGroup(s string) (FakeGPU, int, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 6 {
		return FakeGPU{}, 0, fmt.Errorf("want 2 to 6 colon-separated fields")
	}
	countS, model, ok := strings.Cut(parts[0], "x")
	if !ok || model == "" {
		return FakeGPU{}, 0, fmt.Errorf("%q: want <count>x<model>", parts[0])
	}
	count, err := strconv.Atoi(countS)
	if err != nil || count < 1 || count > maxFakeGPUs {
		return FakeGPU{}, 0, fmt.Errorf("count %q: want 1..%d", countS, maxFakeGPUs)
	}
	mem, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil || mem < 1 || mem > maxFakeMemory {
		return FakeGPU{}, 0, fmt.Errorf("memory %q: want MiB in 1..%d", parts[1], maxFakeMemory)
	}
	g := FakeGPU{Model: model, MemoryMiB: mem, Place: Place{NVLink: -1, PCIe: -1}}
	seen := map[string]bool{}
	for _, opt := range parts[2:] {
		key, v, _ := strings.Cut(opt, "=")
		if key == "mig" && !seen[key] {
			seen[key] = true
			if err := g.parseMIG(v, mem); err != nil {
				return FakeGPU{}, 0, err
			}
			continue
		}
		n, err := strconv.Atoi(v)
		var to *int
		switch key {
		case "numa":
			to = &g.NUMA
		case "nvlink":
			to = &g.NVLink
		case "pcie":
			to = &g.PCIe
		}
		if to == nil || seen[key] || err != nil || n < 0 || n > 255 {
			return FakeGPU{}, 0, fmt.Errorf("%q: want numa=, nvlink= or pcie=<0..255>, or mig=<profile>+..., each once", opt)
		}
		seen[key] = true
		*to = n
	}
	return g, count, nil
}

func fakeServer(fs []FakeGPU) *server.Server {
	cfgs := make([]gpus.Config, len(fs))
	for i, f := range fs {
		cfgs[i] = gpus.Config{Name: f.Model, Architecture: nvml.DEVICE_ARCH_AMPERE, Brand: nvml.BRAND_NVIDIA, MemoryMB: f.MemoryMiB, CudaMajor: 8}
		if f.MIG != nil {
			cfgs[i].MIGProfiles = migPresets()[f.Model].MIGProfiles
		}
	}
	return server.NewServerWithGPUs("550.54.15", "12.550.54.15", 12040, cfgs...)
}

// fakeMIG is each fake GPU's MIG instances, nil where MIG mode is off.
func fakeMIG(fs []FakeGPU) [][]string {
	out := make([][]string, len(fs))
	for i, f := range fs {
		out[i] = f.MIG
	}
	return out
}

func fakePlaces(fs []FakeGPU) []Place {
	out := make([]Place, len(fs))
	for i, f := range fs {
		out[i] = f.Place
	}
	return out
}
