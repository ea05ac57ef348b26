// Package node is the node role, run by every replica: GPU discovery, the
// device plugin and its registration with kubelet, health, the inventory
// annotation and the inspect socket. Its parts live under internal/,
// private to it; the binary starts it through this package alone: its
// settings (config.go, flags.go, validate.go, per-node overrides.go),
// Role (role.go builds its parts once the GPUs are found, then runs them)
// and the inspect client (inspect_cmd.go).
package node

import (
	"time"

	"github.com/vgpud/vgpud/node/internal/health"
)

// Config is the node role's settings.
type Config struct {
	GPUBackend         string  // "nvml", "mock:<machine>" or "fake:<spec>" (gpu.Backends)
	DevicePluginDir    string  // kubelet's device-plugin directory
	DevicePluginSocket string  // our socket's file name in DevicePluginDir
	Split              int     // virtual devices advertised per GPU
	MemoryScaling      float64 // > 1 oversubscribes memory
	CoreScaling        float64
	ExcludeGPUs        []string // GPUs left alone, by UUID or index
	// NodeOverrides holds per-node settings (see Overrides); "" for none.
	NodeOverrides string
	InspectSocket string // unix socket `vgpud inspect` talks to
	// PodResourcesSocket is kubelet's PodResources API, which the node
	// cross-checks assignments against; "" turns the check off.
	PodResourcesSocket string
	// PodResourcesPeriod is how often that check runs.
	PodResourcesPeriod time.Duration
	// Pod is this replica's pod, namespace/name (from --pod-namespace and
	// --pod-name): after a kubelet restart the plugin says serving only
	// once kubelet lists it on PodResourcesSocket. "" does not wait.
	Pod              string
	HealthIgnoreXIDs []uint64
	// HealthRecovery is how long a GPU must stay quiet after a critical
	// XID before it is offered again.
	HealthRecovery time.Duration
	// RescanInterval is how often the node looks for GPUs added or gone
	// (rescan.go); 0 never.
	RescanInterval time.Duration
	// MIGProfileResources offers each MIG profile as a resource of its
	// own (deviceplugin.ProfileServers), where the runtime names pods.
	MIGProfileResources bool
	// MIGOnDemand are the GPUs in MIG mode on which the node makes
	// instances as pods are booked and destroys them after (by index or
	// UUID, or "all"); empty for none. Needs the runtime hook (NRI).
	MIGOnDemand []string
	// MIGOnDemandProfiles are the profiles it may make (e.g. 1g.10gb);
	// empty for every whole-instance profile the driver lists.
	MIGOnDemandProfiles []string
	// MIGRecord is the file where the node records the instances it
	// makes: a host path that outlives the container, so that the next
	// one finds them.
	MIGRecord string
	// InterposerDir is a host directory with HAMi-core's libvgpu.so to mount
	// into GPU containers; "" mounts nothing.
	InterposerDir string
	// AllocateWait bounds how long Allocate waits for the bound pod to
	// reach this replica's informer.
	AllocateWait time.Duration
	// NRISocket is the container runtime's NRI socket. Where it is
	// present the runtime names each container's pod to vgpud's hook;
	// where it is not, or "" here, the node guesses, without NRI.
	NRISocket string
	// RuntimeConfig is the container runtime's configuration, KIND:PATH
	// (preflight.ParseSpec), which the node reads every minute to say
	// whether the runtime fails closed without vgpud; "" reads none.
	// PATH must be visible at the same path inside vgpud's container.
	RuntimeConfig string
	// NRIExemptNamespaces keep every GPU their containers' images or pods
	// name: vgpud's own and the GPU operator's, whose pods read or serve
	// every GPU. Never a tenant's.
	NRIExemptNamespaces []string
	// NRIEarlyNamespaces' containers start even before vgpud's informer
	// has seen their pod, with no GPU, rather than wait: the cluster's,
	// whose network pods must start before vgpud after a reboot. A pod of
	// theirs that vgpud has seen is judged like any other.
	NRIEarlyNamespaces []string
	// GPUUsage is what the node does with each container's measured GPU
	// use: "off", "report", or "enforce" (also kill the largest process of
	// a container over its slice's memory). See usage.Mode.
	GPUUsage string
	// GPUUsagePeriod is how often the node samples its GPUs' processes.
	GPUUsagePeriod time.Duration
	// GPUUsageMargin is how many MiB a container may hold on a GPU past
	// its slice before it is over: room for CUDA contexts, which
	// HAMi-core's limit does not count either.
	GPUUsageMargin int64
	// GPUUsageReserve is how many MiB of each GPU its processes may not
	// take together: past its memory less this, every container above its
	// slice is over, margin or not.
	GPUUsageReserve int64
	// GPUUsageRecord is the file where the enforcer remembers each listed
	// PID's first holder and the containers it ended, on a host path that
	// outlives the container; "{node}" in it is the node's name, so that
	// nodes sharing a host path (a test cluster) keep apart. "" keeps it
	// in memory only.
	GPUUsageRecord string
}

// DefaultConfig returns the settings vgpud runs with when no flag is given.
func DefaultConfig() Config {
	return Config{
		GPUBackend:         "nvml",
		DevicePluginDir:    "/var/lib/kubelet/device-plugins",
		DevicePluginSocket: "vgpud.sock",
		Split:              10,
		MemoryScaling:      1,
		CoreScaling:        1,
		InspectSocket:      "/run/vgpud/inspect.sock",

		PodResourcesSocket:  "/var/lib/kubelet/pod-resources/kubelet.sock",
		PodResourcesPeriod:  10 * time.Second,
		HealthIgnoreXIDs:    health.DefaultIgnoredXIDs,
		HealthRecovery:      5 * time.Minute,
		RescanInterval:      30 * time.Second,
		MIGProfileResources: true,
		MIGRecord:           "/var/lib/vgpud/mig-made.json",
		AllocateWait:        10 * time.Second,
		NRISocket:           "/var/run/nri/nri.sock",
		RuntimeConfig:       "containerd:/etc/containerd/config.toml",
		NRIExemptNamespaces: []string{"vgpud-system", "gpu-operator"},
		NRIEarlyNamespaces:  []string{"kube-system"},
		// Report until the GPU proof (make nvml) has shown a kill on real
		// hardware.
		GPUUsage:       "report",
		GPUUsagePeriod: time.Second,
		GPUUsageMargin: 1024,
		GPUUsageRecord: "/var/lib/vgpud/gpu-usage-{node}.json",
	}
}

// Bounds of the node's durations; the flags' checks and help are built
// from them.
const (
	// MinHealthRecovery keeps a flapping GPU from being offered between
	// two XIDs.
	MinHealthRecovery = time.Second
	// MaxAllocateWait stays below kubelet's own Allocate deadline.
	MaxAllocateWait = 2 * time.Minute
	// A container over its slice holds the memory for up to two periods:
	// sampling NVML more often than MinGPUUsagePeriod costs more than it
	// tells, and slower than MaxGPUUsagePeriod lets a neighbour fail.
	MinGPUUsagePeriod = 100 * time.Millisecond
	MaxGPUUsagePeriod = 10 * time.Second
	// MaxGPUUsageMarginMiB is more than any CUDA context needs.
	MaxGPUUsageMarginMiB = 16384
)
