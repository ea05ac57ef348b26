package node

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/internal/configapi"
	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/usage"
)

// The node role's flags; Validate names a bad value by these.
const (
	flagGPUBackend          = "gpu-backend"
	flagDevicePluginDir     = "device-plugin-dir"
	flagSplit               = "split"
	flagMemoryScaling       = "memory-scaling"
	flagCoreScaling         = "core-scaling"
	flagDevicePluginSocket  = "device-plugin-socket"
	flagExcludeGPUs         = "exclude-gpus"
	flagNodeOverrides       = "node-overrides"
	flagHealthIgnoreXIDs    = "health-ignore-xids"
	flagHealthRecovery      = "health-recovery"
	flagRescanInterval      = "rescan-interval"
	flagMIGProfileResources = "mig-profile-resources"
	flagMIGOnDemand         = "mig-on-demand"
	flagMIGOnDemandProfiles = "mig-on-demand-profiles"
	flagMIGRecord           = "mig-record"
	flagInterposerDir       = "interposer-dir"
	flagAllocateWait        = "allocate-wait"
	flagPodResourcesSocket  = "pod-resources-socket"
	flagPodResourcesPeriod  = "pod-resources-period"
	flagNRISocket           = "nri-socket"
	flagRuntimeConfig       = "runtime-config"
	flagNRIExemptNamespaces = "nri-exempt-namespaces"
	flagNRIEarlyNamespaces  = "nri-early-namespaces"
	flagInspectSocket       = "inspect-socket"
	flagGPUUsage            = "gpu-usage"
	flagGPUUsagePeriod      = "gpu-usage-period"
	flagGPUUsageMargin      = "gpu-usage-margin"
	flagGPUUsageReserve     = "gpu-usage-reserve"
	flagGPUUsageRecord      = "gpu-usage-record"
)

// InspectSocketFlag is --inspect-socket, which `vgpud inspect` shares
// with the role.
func (c *Config) InspectSocketFlag() cli.Flag {
	return &cli.StringFlag{Name: flagInspectSocket, Usage: "unix socket that vgpud inspect reads", Value: c.InspectSocket, Destination: &c.InspectSocket}
}

// RuntimeConfigFlag is --runtime-config, which `vgpud preflight` shares
// with the role.
func (c *Config) RuntimeConfigFlag() cli.Flag {
	return &cli.StringFlag{Name: flagRuntimeConfig, Usage: "the container runtime's configuration as KIND:PATH, KIND containerd or cri-o (CRI-O reads crio.conf.d beside PATH), read with its imports or drop-ins to say whether the runtime fails closed without vgpud; PATH as seen in vgpud's container, where the host's directory is mounted at the same path; empty reads none", Value: c.RuntimeConfig, Destination: &c.RuntimeConfig}
}

// NRISocketFlag is --nri-socket, which `vgpud preflight` shares with the
// role.
func (c *Config) NRISocketFlag() cli.Flag {
	return &cli.StringFlag{Name: flagNRISocket, Usage: "the container runtime's NRI socket: where present, the runtime names each container's pod and vgpud sets its GPUs as it is created; where absent, or empty here, the node guesses which pod kubelet admits", Value: c.NRISocket, Destination: &c.NRISocket}
}

// Flags are the node role's settings, bound to c. A list flag replaces
// its default when given, as comma-separated values.
func (c *Config) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: flagGPUBackend, Usage: "where GPUs come from: " + gpu.Backends(), Value: c.GPUBackend, Destination: &c.GPUBackend},
		&cli.StringFlag{Name: flagDevicePluginDir, Usage: "kubelet's device-plugin directory", Value: c.DevicePluginDir, Destination: &c.DevicePluginDir},
		&cli.IntFlag{Name: flagSplit, Usage: fmt.Sprintf("virtual devices advertised per GPU, how many containers may share one (%d..%d)", MinSplit, MaxSplit), Value: c.Split, Destination: &c.Split},
		&cli.Float64Flag{Name: flagMemoryScaling, Usage: fmt.Sprintf("factor on each GPU's memory; above 1 oversubscribes (at most %d)", MaxScaling), Value: c.MemoryScaling, Destination: &c.MemoryScaling},
		&cli.Float64Flag{Name: flagCoreScaling, Usage: fmt.Sprintf("factor on each GPU's cores (at most %d)", MaxScaling), Value: c.CoreScaling, Destination: &c.CoreScaling},
		&cli.StringFlag{Name: flagDevicePluginSocket, Usage: "file name of vgpud's socket in the device-plugin directory", Value: c.DevicePluginSocket, Destination: &c.DevicePluginSocket},
		&cli.StringSliceFlag{Name: flagExcludeGPUs, Usage: "GPUs vgpud leaves alone, by index or UUID (comma-separated)",
			Action: func(_ *cli.Context, v []string) error { c.ExcludeGPUs = slices.DeleteFunc(v, isEmpty); return nil }},
		&cli.StringFlag{Name: flagNodeOverrides, Usage: "YAML file of per-node " + configapi.Keys(c.fileSettings()) + ", by node name or label (usually a ConfigMap key); empty for none", Value: c.NodeOverrides, Destination: &c.NodeOverrides},
		&cli.Uint64SliceFlag{Name: flagHealthIgnoreXIDs, Usage: "XIDs that do not make a GPU unhealthy (application faults)", Value: cli.NewUint64Slice(c.HealthIgnoreXIDs...),
			Action: func(_ *cli.Context, v []uint64) error { c.HealthIgnoreXIDs = v; return nil }},
		&cli.DurationFlag{Name: flagHealthRecovery, Usage: "quiet time after a critical XID before a GPU that answers NVML again is offered again", Value: c.HealthRecovery, Destination: &c.HealthRecovery},
		&cli.DurationFlag{Name: flagRescanInterval, Usage: "how often the node looks for GPUs added or gone (the NVIDIA driver's PCI devices in sysfs) and for MIG instances others made or destroyed, and, on a change, serves what is there now; 0 never", Value: c.RescanInterval, Destination: &c.RescanInterval},
		&cli.BoolFlag{Name: flagMIGProfileResources, Usage: "offer each MIG profile as a resource of its own (nvidia.com/mig-1g.10gb, NVIDIA's mixed strategy) where the runtime hook names pods; false beside NVIDIA's device plugin serving those names", Value: c.MIGProfileResources, Destination: &c.MIGProfileResources},
		&cli.StringSliceFlag{Name: flagMIGOnDemand, Usage: "GPUs in MIG mode on which the node makes an instance for each pod booked there and destroys it after, by index or UUID, or all (comma-separated; unproven on real MIG hardware); empty for none. Needs the runtime hook (NRI)",
			Action: func(_ *cli.Context, v []string) error { c.MIGOnDemand = slices.DeleteFunc(v, isEmpty); return nil }},
		&cli.StringSliceFlag{Name: flagMIGOnDemandProfiles, Usage: "MIG profiles the node may make on demand, e.g. 1g.10gb,3g.40gb (comma-separated); empty for every whole-instance profile the driver lists",
			Action: func(_ *cli.Context, v []string) error {
				c.MIGOnDemandProfiles = slices.DeleteFunc(v, isEmpty)
				return nil
			}},
		&cli.StringFlag{Name: flagMIGRecord, Usage: "file recording the MIG instances the node made on demand, on a host path that outlives the container", Value: c.MIGRecord, Destination: &c.MIGRecord},
		&cli.StringFlag{Name: flagInterposerDir, Usage: "host directory holding HAMi-core's libvgpu.so, mounted into GPU containers with an ld.so.preload; empty mounts nothing", Value: c.InterposerDir, Destination: &c.InterposerDir},
		&cli.DurationFlag{Name: flagAllocateWait, Usage: "how long Allocate waits for the pod kubelet admits to reach this replica's informer (at most " + MaxAllocateWait.String() + ")", Value: c.AllocateWait, Destination: &c.AllocateWait},
		&cli.StringFlag{Name: flagPodResourcesSocket, Usage: "kubelet's PodResources socket; the node role checks each allocated pod's devices there against its assignment; empty disables", Value: c.PodResourcesSocket, Destination: &c.PodResourcesSocket},
		&cli.DurationFlag{Name: flagPodResourcesPeriod, Usage: "how often the node role checks kubelet's PodResources against the assignments", Value: c.PodResourcesPeriod, Destination: &c.PodResourcesPeriod},
		c.RuntimeConfigFlag(),
		c.NRISocketFlag(),
		&cli.StringSliceFlag{Name: flagNRIExemptNamespaces, Usage: "namespaces whose containers keep the GPUs their image or pod names, and are never held up by vgpud's informer (vgpud's own, the GPU operator's; never a tenant's)", Value: cli.NewStringSlice(c.NRIExemptNamespaces...),
			Action: func(_ *cli.Context, v []string) error {
				c.NRIExemptNamespaces = slices.DeleteFunc(v, isEmpty)
				return nil
			}},
		&cli.StringSliceFlag{Name: flagNRIEarlyNamespaces, Usage: "namespaces whose containers start with no GPU when vgpud's informer has not seen their pod yet, rather than wait (the cluster's pod network); a pod vgpud has seen is judged like any other", Value: cli.NewStringSlice(c.NRIEarlyNamespaces...),
			Action: func(_ *cli.Context, v []string) error {
				c.NRIEarlyNamespaces = slices.DeleteFunc(v, isEmpty)
				return nil
			}},
		&cli.StringFlag{Name: flagGPUUsage, Usage: "what the node does with each container's GPU use, which it samples from the driver: " + strings.Join(usage.Modes, ", ") +
			" (enforce also kills the largest process of a container over its slice's memory on a GPU; needs the NRI hook)", Value: c.GPUUsage, Destination: &c.GPUUsage},
		&cli.DurationFlag{Name: flagGPUUsagePeriod, Usage: fmt.Sprintf("how often the node samples its GPUs' processes (%s..%s); a container over its slice holds the memory for at most two periods", MinGPUUsagePeriod, MaxGPUUsagePeriod), Value: c.GPUUsagePeriod, Destination: &c.GPUUsagePeriod},
		&cli.Int64Flag{Name: flagGPUUsageMargin, Usage: "MiB a container may hold on a GPU past its slice before it is over: room for CUDA contexts, which the slice does not count, on a GPU that has room", Value: c.GPUUsageMargin, Destination: &c.GPUUsageMargin},
		&cli.Int64Flag{Name: flagGPUUsageReserve, Usage: "MiB of each GPU its processes may not take together: past its memory less this, every container above its slice is over, margin or not", Value: c.GPUUsageReserve, Destination: &c.GPUUsageReserve},
		&cli.StringFlag{Name: flagGPUUsageRecord, Usage: "file where the node remembers who held each GPU process's PID first and the containers it ended, on a host path; {node} is the node's name; empty keeps it in memory only", Value: c.GPUUsageRecord, Destination: &c.GPUUsageRecord},
		c.InspectSocketFlag(),
	}
}

// isEmpty drops the empty entries of a list flag (urfave/cli trims
// each): "a, b," reads as [a b].
func isEmpty(s string) bool { return s == "" }
