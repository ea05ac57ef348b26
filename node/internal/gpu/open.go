package gpu

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// mockMachines are go-nvml's mock machines, by the name --gpu-backend
// gives after "mock:".
func mockMachines() map[string]func() *server.Server {
	return map[string]func() *server.Server{
		"dgxa100": dgxa100.New,
		"dgxh100": dgxh100.New,
		"dgxh200": dgxh200.New,
		"dgxb200": dgxb200.New,
	}
}

// Backends lists the accepted --gpu-backend values, for help and errors.
func Backends() string {
	var mocks []string
	for name := range mockMachines() {
		mocks = append(mocks, "mock:"+name)
	}
	slices.Sort(mocks)
	return "nvml, " + strings.Join(mocks, ", ") + ", fake:<count>x<model>:<MiB>[:numa=<n>][:nvlink=<n>][:pcie=<n>][:mig=<profile>+...][,...]"
}

// ValidateBackend checks a --gpu-backend value without opening it.
func ValidateBackend(backend string) error {
	_, err := parseBackend(backend)
	return err
}

// backend is a parsed --gpu-backend value: the driver, a mock machine, or
// fake GPUs.
type backend struct {
	mock func() *server.Server
	fake []FakeGPU
}

func parseBackend(s string) (backend, error) {
	if s == "nvml" {
		return backend{}, nil
	}
	if spec, ok := strings.CutPrefix(s, "fake:"); ok {
		gpus, err := ParseFake(spec)
		if err != nil {
			return backend{}, fmt.Errorf("gpu backend %q: %w", s, err)
		}
		return backend{fake: gpus}, nil
	}
	if machine, ok := strings.CutPrefix(s, "mock:"); ok {
		if mk, ok := mockMachines()[machine]; ok {
			return backend{mock: mk}, nil
		}
	}
	return backend{}, fmt.Errorf("gpu backend %q is unknown; want %s", s, Backends())
}

// Open returns the NVML library for a --gpu-backend value: "nvml" for the
// driver, "mock:<machine>" for one of go-nvml's mock machines, or
// "fake:<spec>" for a machine described on the command line (see
// ParseFake). Mocks and fakes get UUIDs derived from nodeName, so they
// survive restarts (the stock mocks draw random ones), and accept injected
// XID events.
func Open(name, nodeName string) (nvml.Interface, error) {
	b, err := parseBackend(name)
	switch {
	case err != nil:
		return nil, err
	case b.fake != nil:
		return newMock(fakeServer(b.fake), nodeName, fakePlaces(b.fake), fakeMIG(b.fake))
	case b.mock == nil:
		return nvml.New(), nil
	}
	s := b.mock()
	// A DGX has two sockets, the first half of its GPUs on the first; an
	// NVSwitch joins every GPU; two GPUs share each PCIe switch.
	places := make([]Place, len(s.Devices))
	for i := range places {
		places[i] = Place{NUMA: i * 2 / len(places), NVLink: 0, PCIe: i / 2}
	}
	return newMock(s, nodeName, places, nil)
}

// stableUUID is a GPU-<uuid>-shaped name that depends only on node and index.
func stableUUID(node string, index int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("vgpud-mock/%s/%d", node, index)))
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
