package node

import (
	"fmt"
	"strings"

	"github.com/vgpud/vgpud/node/gpu"
)

// Backends that --gpu-backend accepts. "nvml" is the real driver; the rest
// are mocks and must be chosen explicitly: vgpud never falls back to a mock.
var mockBackends = []string{"mock:dgxa100", "mock:dgxh100", "mock:dgxh200", "mock:dgxb200"}

// Config is the node role's settings.
type Config struct {
	Backend       string  // "nvml", "mock:<machine>" or "fake:<spec>"
	PluginDir     string  // kubelet's device-plugin directory
	Split         int     // virtual devices advertised per GPU
	MemoryScaling float64 // > 1 oversubscribes memory
	CoreScaling   float64
	InspectSocket string // unix socket `vgpud inspect` talks to
}

// DefaultConfig returns the settings vgpud runs with when no flag is given.
func DefaultConfig() Config {
	return Config{
		Backend:       "nvml",
		PluginDir:     "/var/lib/kubelet/device-plugins",
		Split:         10,
		MemoryScaling: 1,
		CoreScaling:   1,
		InspectSocket: "/run/vgpud/inspect.sock",
	}
}

// BackendChoices lists the accepted --gpu-backend values for messages.
func BackendChoices() string {
	return "nvml, " + strings.Join(mockBackends, ", ") + ", fake:<count>x<model>:<MiB>[:numa=<n>][,...]"
}

// ValidateBackend checks a --gpu-backend value.
func ValidateBackend(s string) error {
	if s == "nvml" {
		return nil
	}
	for _, m := range mockBackends {
		if s == m {
			return nil
		}
	}
	if spec, ok := strings.CutPrefix(s, "fake:"); ok {
		_, err := gpu.ParseFake(spec)
		return err
	}
	return fmt.Errorf("unknown GPU backend %q", s)
}
