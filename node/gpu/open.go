package gpu

import (
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Open returns the NVML library for a --gpu-backend value: "nvml" for the
// driver, "mock:<machine>" for one of go-nvml's mock machines, or
// "fake:<spec>" for a machine described on the command line (see
// ParseFake). Mocks and fakes get UUIDs derived from nodeName, so they
// survive restarts (the stock mocks draw random ones), and accept injected
// XID events.
func Open(backend, nodeName string) (nvml.Interface, error) {
	if backend == "nvml" {
		return nvml.New(), nil
	}
	if spec, ok := strings.CutPrefix(backend, "fake:"); ok {
		gpus, err := ParseFake(spec)
		if err != nil {
			return nil, fmt.Errorf("gpu backend %q: %w", backend, err)
		}
		return newMock(fakeServer(gpus), nodeName, fakeNUMA(gpus)), nil
	}
	machine, ok := strings.CutPrefix(backend, "mock:")
	if !ok {
		return nil, fmt.Errorf("gpu backend %q: want nvml, mock:<machine> or fake:<spec>", backend)
	}
	var s *server.Server
	switch machine {
	case "dgxa100":
		s = dgxa100.New()
	case "dgxh100":
		s = dgxh100.New()
	case "dgxh200":
		s = dgxh200.New()
	case "dgxb200":
		s = dgxb200.New()
	default:
		return nil, fmt.Errorf("gpu backend %q: no such mock machine; want dgxa100, dgxh100, dgxh200 or dgxb200", backend)
	}
	// A DGX has two sockets; the first half of its GPUs hangs off the first.
	numa := make([]int, len(s.Devices))
	for i := range numa {
		numa[i] = i * 2 / len(numa)
	}
	return newMock(s, nodeName, numa), nil
}

// stableUUID is a GPU-<uuid>-shaped name that depends only on node and index.
func stableUUID(node string, index int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("vgpud-mock/%s/%d", node, index)))
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
