package node

import (
	"time"

	"github.com/vgpud/vgpud/node/health"
)

// Config is the node role's settings.
type Config struct {
	Backend       string  // "nvml", "mock:<machine>" or "fake:<spec>" (gpu.Backends)
	PluginDir     string  // kubelet's device-plugin directory
	PluginSocket  string  // our socket's file name in PluginDir
	Split         int     // virtual devices advertised per GPU
	MemoryScaling float64 // > 1 oversubscribes memory
	CoreScaling   float64
	Exclude       []string // GPUs left alone, by UUID or index
	// OverridesFile holds per-node settings (see Overrides); "" for none.
	OverridesFile string
	InspectSocket string // unix socket `vgpud inspect` talks to
	// PodResourcesSocket is kubelet's PodResources API, which the node
	// cross-checks assignments against; "" turns the check off.
	PodResourcesSocket string
	// Pod is this replica's pod, namespace/name (from --pod-namespace and
	// --pod-name): after a kubelet restart the plugin says serving only
	// once kubelet lists it on PodResourcesSocket. "" does not wait.
	Pod         string
	IgnoredXIDs []uint64
	// HealthRecovery is how long a GPU must stay quiet after a critical
	// XID before it is offered again.
	HealthRecovery time.Duration
	// Interposer is a host directory with HAMi-core's libvgpu.so to mount
	// into GPU containers; "" mounts nothing.
	Interposer string
	// ResolveWait bounds how long Allocate waits for the bound pod to
	// reach this replica's informer.
	ResolveWait time.Duration
}

// DefaultConfig returns the settings vgpud runs with when no flag is given.
func DefaultConfig() Config {
	return Config{
		Backend:       "nvml",
		PluginDir:     "/var/lib/kubelet/device-plugins",
		PluginSocket:  "vgpud.sock",
		Split:         10,
		MemoryScaling: 1,
		CoreScaling:   1,
		InspectSocket: "/run/vgpud/inspect.sock",

		PodResourcesSocket: "/var/lib/kubelet/pod-resources/kubelet.sock",
		IgnoredXIDs:        health.DefaultIgnoredXIDs,
		HealthRecovery:     5 * time.Minute,
		ResolveWait:        10 * time.Second,
	}
}

// Bounds of the node's durations; the flags' checks and help are built
// from them.
const (
	// MinHealthRecovery keeps a flapping GPU from being offered between
	// two XIDs.
	MinHealthRecovery = time.Second
	// MaxResolveWait stays below kubelet's own Allocate deadline.
	MaxResolveWait = 2 * time.Minute
)
