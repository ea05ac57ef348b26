package webhook

import "github.com/vgpud/vgpud/protocol"

// Core-limit policies passed to the container as GPU_CORE_UTILIZATION_POLICY
// (protocol.EnvCorePolicy). HAMi's third, disable, never limits: a value
// a pod could then set for itself to escape its gpucores, so it is not
// offered, and no env may set it (protocol.EnvAllowed).
const (
	CorePolicyDefault = protocol.CorePolicyDefault
	CorePolicyForce   = protocol.CorePolicyForce
)

// Environment variables the webhook sets in containers.
const (
	EnvTaskPriority      = protocol.EnvTaskPriority
	EnvCorePolicy        = protocol.EnvCorePolicy
	EnvVisibleDevices    = protocol.EnvVisibleDevices
	VisibleDevicesNone   = protocol.VisibleDevicesNone
	defaultSchedulerName = "default-scheduler"
	// DefaultGPUCount is the nvidia.com/gpu a container that gives only
	// memory or cores asks, as the manifest's vgpud-gpu-pods policy sets
	// it in the apiserver first.
	DefaultGPUCount = 1
)

// Config is the webhook's own settings. The scheduler name and resource
// names, which other parts share, are passed to NewPods.
type Config struct {
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
	return Config{}
}

// CorePolicies lists the accepted core-limit policies; empty means none is injected.
func CorePolicies() []string {
	return []string{CorePolicyDefault, CorePolicyForce}
}
