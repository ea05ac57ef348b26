package webhook

import (
	"time"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/webhook/certs"
)

// Core-limit policies passed to the container as GPU_CORE_UTILIZATION_POLICY.
// HAMi-core reads them: default limits cores only when the GPU is shared,
// force always limits, disable never does.
const (
	CorePolicyDefault = "default"
	CorePolicyForce   = "force"
	CorePolicyDisable = "disable"
)

// Environment variables the webhook sets in containers.
const (
	EnvTaskPriority      = protocol.EnvTaskPriority
	EnvCorePolicy        = "GPU_CORE_UTILIZATION_POLICY"
	EnvVisibleDevices    = protocol.EnvVisibleDevices
	VisibleDevicesNone   = "none"
	defaultSchedulerName = "default-scheduler"
)

// Config is the webhook's settings.
type Config struct {
	// SchedulerName is the kube-scheduler profile that calls vgpud's
	// extender; main fills it from the cluster role's --scheduler-name.
	SchedulerName string
	// OverrideDefaultScheduler also takes pods that name default-scheduler.
	OverrideDefaultScheduler bool
	// DefaultGPUCount is the nvidia.com/gpu added when a container gives
	// only memory or cores.
	DefaultGPUCount int
	// RuntimeClassName is set on GPU pods that have none; empty sets nothing.
	RuntimeClassName string
	// CorePolicy is injected as env when set: default, force or disable.
	CorePolicy string
	// VisibleDevicesNone hides every GPU from the containers of a GPU pod
	// that ask for none, so the NVIDIA runtime does not expose all of them.
	VisibleDevicesNone bool
	// Resources are the extended resource names vgpud serves.
	Resources protocol.ResourceNames

	// TLS: where the certificate lives and what it is valid for.
	SecretName        string
	WebhookConfigName string
	ServiceName       string
	CertValidity      time.Duration
	RenewBefore       time.Duration
}

// DefaultConfig returns the settings vgpud runs with when no flag is given.
func DefaultConfig() Config {
	return Config{
		SchedulerName:            "vgpud-scheduler",
		OverrideDefaultScheduler: true,
		DefaultGPUCount:          1,
		Resources:                protocol.DefaultResourceNames(),
		SecretName:               "vgpud-tls",
		WebhookConfigName:        "vgpud",
		ServiceName:              "vgpud",
		CertValidity:             365 * 24 * time.Hour,
		RenewBefore:              30 * 24 * time.Hour,
	}
}

// CorePolicies lists the accepted core-limit policies; empty means none is injected.
func CorePolicies() []string {
	return []string{CorePolicyDefault, CorePolicyForce, CorePolicyDisable}
}

// Certs returns the certificate manager's settings for a leader running in namespace.
func (c Config) Certs(namespace string) certs.Config {
	return certs.Config{
		Namespace:   namespace,
		SecretName:  c.SecretName,
		WebhookName: c.WebhookConfigName,
		ServiceName: c.ServiceName,
		Validity:    c.CertValidity,
		RenewBefore: c.RenewBefore,
	}
}
