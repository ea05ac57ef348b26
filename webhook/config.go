package webhook

import "github.com/vgpud/vgpud/protocol"

// Core-limit policies passed to the container as GPU_CORE_UTILIZATION_POLICY.
// HAMi-core reads them: default limits cores only when the GPU is shared,
// force always limits. HAMi's third, disable, never limits: a value a pod
// could then set for itself to escape its gpucores, so the apiserver
// refuses it in any env (policy vgpud-slice-env) and it is not offered.
const (
	CorePolicyDefault = "default"
	CorePolicyForce   = "force"
)

// Environment variables the webhook sets in containers.
const (
	EnvTaskPriority      = protocol.EnvTaskPriority
	EnvCorePolicy        = "GPU_CORE_UTILIZATION_POLICY"
	EnvVisibleDevices    = protocol.EnvVisibleDevices
	VisibleDevicesNone   = "none"
	defaultSchedulerName = "default-scheduler"
)

// Config is the webhook's own settings. The scheduler name and resource
// names, which other parts share, are passed to NewPods.
type Config struct {
	// OverrideDefaultScheduler also takes pods that name default-scheduler.
	OverrideDefaultScheduler bool
	// DefaultGPUCount is the nvidia.com/gpu added when a container gives
	// only memory or cores.
	DefaultGPUCount int
	// RuntimeClass is set on GPU pods that have none; empty sets nothing.
	RuntimeClass string
	// CorePolicy is injected as env when set: default, force or disable.
	CorePolicy string
	// VisibleDevicesNone hides every GPU from the containers of a GPU pod
	// that ask for none, so the NVIDIA runtime does not expose all of them.
	VisibleDevicesNone bool
}

// DefaultConfig returns the settings vgpud runs with when no flag is given.
func DefaultConfig() Config {
	return Config{
		OverrideDefaultScheduler: true,
		DefaultGPUCount:          1,
	}
}

// CorePolicies lists the accepted core-limit policies; empty means none is injected.
func CorePolicies() []string {
	return []string{CorePolicyDefault, CorePolicyForce}
}
