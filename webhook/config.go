package webhook

import (
	"github.com/vgpud/vgpud/protocol/containerenv"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Core-limit policies passed to the container as GPU_CORE_UTILIZATION_POLICY
// (containerenv.EnvCorePolicy). HAMi's third, disable, never limits: a value
// a pod could then set for itself to escape its gpucores, so it is not
// offered, and no env may set it (containerenv.EnvAllowed).
const (
	CorePolicyDefault = containerenv.CorePolicyDefault
	CorePolicyForce   = containerenv.CorePolicyForce
)

// Environment variables the webhook sets in containers.
const (
	EnvTaskPriority      = containerenv.EnvTaskPriority
	EnvCorePolicy        = containerenv.EnvCorePolicy
	EnvVisibleDevices    = containerenv.EnvVisibleDevices
	VisibleDevicesNone   = containerenv.VisibleDevicesNone
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
	// HookOptionalNamespaces' pods are never marked as requiring vgpud's
	// runtime hook, as the manifest's policies list them: vgpud's own,
	// which start the hook, and those that start before it.
	HookOptionalNamespaces []string
	// ClaimDeviceClass is the DeviceClass of the claims ClaimPods makes.
	ClaimDeviceClass string
}

// DefaultConfig returns the settings vgpud runs with when no flag is given.
func DefaultConfig() Config {
	return Config{HookOptionalNamespaces: []string{"vgpud-system", "kube-system", "gpu-operator"}, ClaimDeviceClass: wellknown.DRAClassGPU}
}

// CorePolicies lists the accepted core-limit policies; empty means none is injected.
func CorePolicies() []string {
	return []string{CorePolicyDefault, CorePolicyForce}
}
