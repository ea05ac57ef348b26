package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/node"
	"github.com/vgpud/vgpud/node/gpu"
)

func nodeFlags(cfg *node.Config) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "gpu-backend", Usage: "where GPUs come from: " + gpu.Backends(), EnvVars: envVar("gpu-backend"), Value: cfg.GPUBackend, Destination: &cfg.GPUBackend},
		&cli.StringFlag{Name: "device-plugin-dir", Usage: "kubelet's device-plugin directory", EnvVars: envVar("device-plugin-dir"), Value: cfg.DevicePluginDir, Destination: &cfg.DevicePluginDir},
		&cli.IntFlag{Name: "split", Usage: fmt.Sprintf("virtual devices advertised per GPU, how many containers may share one (%d..%d)", node.MinSplit, node.MaxSplit), EnvVars: envVar("split"), Value: cfg.Split, Destination: &cfg.Split},
		&cli.Float64Flag{Name: "memory-scaling", Usage: fmt.Sprintf("factor on each GPU's memory; above 1 oversubscribes (at most %d)", node.MaxScaling), EnvVars: envVar("memory-scaling"), Value: cfg.MemoryScaling, Destination: &cfg.MemoryScaling},
		&cli.Float64Flag{Name: "core-scaling", Usage: fmt.Sprintf("factor on each GPU's cores (at most %d)", node.MaxScaling), EnvVars: envVar("core-scaling"), Value: cfg.CoreScaling, Destination: &cfg.CoreScaling},
		&cli.StringFlag{Name: "device-plugin-socket", Usage: "file name of vgpud's socket in the device-plugin directory", EnvVars: envVar("device-plugin-socket"), Value: cfg.DevicePluginSocket, Destination: &cfg.DevicePluginSocket},
		&cli.StringSliceFlag{Name: "exclude-gpus", Usage: "GPUs vgpud leaves alone, by index or UUID (comma-separated)", EnvVars: envVar("exclude-gpus")},
		&cli.StringFlag{Name: "node-overrides", Usage: "YAML file of per-node split, memoryScaling, coreScaling and exclude (usually a ConfigMap key); empty for none", EnvVars: envVar("node-overrides"), Value: cfg.NodeOverrides, Destination: &cfg.NodeOverrides},
		&cli.Uint64SliceFlag{Name: "health-ignore-xids", Usage: "XIDs that do not make a GPU unhealthy (application faults)", EnvVars: envVar("health-ignore-xids"), Value: cli.NewUint64Slice(cfg.HealthIgnoreXIDs...)},
		&cli.DurationFlag{Name: "health-recovery", Usage: "quiet time after a critical XID before a GPU that answers NVML again is offered again", EnvVars: envVar("health-recovery"), Value: cfg.HealthRecovery, Destination: &cfg.HealthRecovery},
		&cli.StringFlag{Name: "interposer-dir", Usage: "host directory holding HAMi-core's libvgpu.so, mounted into GPU containers with an ld.so.preload; empty mounts nothing", EnvVars: envVar("interposer-dir"), Value: cfg.InterposerDir, Destination: &cfg.InterposerDir},
		&cli.DurationFlag{Name: "allocate-wait", Usage: "how long Allocate waits for the pod kubelet admits to reach this replica's informer (at most " + node.MaxAllocateWait.String() + ")", EnvVars: envVar("allocate-wait"), Value: cfg.AllocateWait, Destination: &cfg.AllocateWait},
		&cli.StringFlag{Name: "pod-resources-socket", Usage: "kubelet's PodResources socket; the node role checks each allocated pod's devices there against its assignment; empty disables", EnvVars: envVar("pod-resources-socket"), Value: cfg.PodResourcesSocket, Destination: &cfg.PodResourcesSocket},
		&cli.DurationFlag{Name: "pod-resources-period", Usage: "how often the node role checks kubelet's PodResources against the assignments", EnvVars: envVar("pod-resources-period"), Value: cfg.PodResourcesPeriod, Destination: &cfg.PodResourcesPeriod},
		&cli.StringFlag{Name: "nri-socket", Usage: "the container runtime's NRI socket: where present, the runtime names each container's pod and vgpud sets its GPUs as it is created; where absent, or empty here, the node guesses which pod kubelet admits", EnvVars: envVar("nri-socket"), Value: cfg.NRISocket, Destination: &cfg.NRISocket},
		&cli.StringSliceFlag{Name: "nri-exempt-namespaces", Usage: "namespaces whose containers keep the GPUs their image or pod names, and are never held up by vgpud's informer (vgpud's own, the cluster's, the GPU operator's; never a tenant's)", EnvVars: envVar("nri-exempt-namespaces"), Value: cli.NewStringSlice(cfg.NRIExemptNamespaces...)},
		&cli.StringFlag{Name: "inspect-socket", Usage: "unix socket that `vgpud inspect` reads", EnvVars: envVar("inspect-socket"), Value: cfg.InspectSocket, Destination: &cfg.InspectSocket},
	}
}
