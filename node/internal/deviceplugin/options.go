package deviceplugin

import (
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The flags of Options.
const (
	FlagDevicePluginDir     = "device-plugin-dir"
	FlagDevicePluginSocket  = "device-plugin-socket"
	FlagAllocateWait        = "allocate-wait"
	FlagPodResourcesSocket  = "pod-resources-socket"
	FlagPodResourcesPeriod  = "pod-resources-period"
	FlagMIGProfileResources = "mig-profile-resources"
)

// MaxAllocateWait stays below kubelet's own Allocate deadline.
const MaxAllocateWait = 2 * time.Minute

// Options are the device plugin's settings.
type Options struct {
	DevicePluginDir    string // kubelet's device-plugin directory
	DevicePluginSocket string // our socket's file name in DevicePluginDir
	// AllocateWait bounds how long Allocate waits for the bound pod to
	// reach this replica's informer.
	AllocateWait time.Duration
	// PodResourcesSocket is kubelet's PodResources API, which the node
	// cross-checks assignments against; "" turns the check off.
	PodResourcesSocket string
	// PodResourcesPeriod is how often that check runs.
	PodResourcesPeriod time.Duration
	// MIGProfileResources offers each MIG profile as a resource of its
	// own (ProfileServers), where the runtime names pods.
	MIGProfileResources bool
}

// DefaultOptions are kubelet's paths and vgpud's socket.
func DefaultOptions() Options {
	return Options{
		DevicePluginDir:     "/var/lib/kubelet/device-plugins",
		DevicePluginSocket:  "vgpud.sock",
		AllocateWait:        10 * time.Second,
		PodResourcesSocket:  "/var/lib/kubelet/pod-resources/kubelet.sock",
		PodResourcesPeriod:  10 * time.Second,
		MIGProfileResources: true,
	}
}

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagDevicePluginDir, Usage: "kubelet's device-plugin directory", Value: o.DevicePluginDir, Destination: &o.DevicePluginDir},
		&cli.StringFlag{Name: FlagDevicePluginSocket, Usage: "file name of vgpud's socket in the device-plugin directory", Value: o.DevicePluginSocket, Destination: &o.DevicePluginSocket},
		&cli.BoolFlag{Name: FlagMIGProfileResources, Usage: "offer each MIG profile as a resource of its own (nvidia.com/mig-1g.10gb, NVIDIA's mixed strategy) where the runtime hook names pods; false beside NVIDIA's device plugin serving those names", Value: o.MIGProfileResources, Destination: &o.MIGProfileResources},
		&cli.DurationFlag{Name: FlagAllocateWait, Usage: "how long Allocate waits for the pod kubelet admits to reach this replica's informer (at most " + MaxAllocateWait.String() + ")", Value: o.AllocateWait, Destination: &o.AllocateWait},
		&cli.StringFlag{Name: FlagPodResourcesSocket, Usage: "kubelet's PodResources socket; the node role checks each allocated pod's devices there against its assignment; empty disables", Value: o.PodResourcesSocket, Destination: &o.PodResourcesSocket},
		&cli.DurationFlag{Name: FlagPodResourcesPeriod, Usage: "how often the node role checks kubelet's PodResources against the assignments", Value: o.PodResourcesPeriod, Destination: &o.PodResourcesPeriod},
	}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	var errs field.ErrorList
	invalid := func(flag string, v any, want string) {
		errs = append(errs, field.Invalid(field.NewPath(flag), v, want))
	}
	if o.DevicePluginSocket == "" || strings.ContainsRune(o.DevicePluginSocket, '/') || o.DevicePluginSocket == "kubelet.sock" {
		invalid(FlagDevicePluginSocket, o.DevicePluginSocket, "want a plain file name other than kubelet.sock, such as vgpud.sock")
	}
	if o.AllocateWait <= 0 || o.AllocateWait > MaxAllocateWait {
		invalid(FlagAllocateWait, o.AllocateWait, "want above 0 and at most "+MaxAllocateWait.String()+" (kubelet's Allocate times out)")
	}
	if o.PodResourcesPeriod < time.Second {
		invalid(FlagPodResourcesPeriod, o.PodResourcesPeriod, "want at least 1s")
	}
	if o.DevicePluginDir == "" {
		invalid(FlagDevicePluginDir, "", "want kubelet's device-plugin directory, usually /var/lib/kubelet/device-plugins")
	}
	return errs
}
