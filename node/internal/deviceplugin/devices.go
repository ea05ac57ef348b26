package deviceplugin

import (
	"fmt"
	"strconv"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// AdvertisedGPU is a physical AdvertisedGPU the plugin advertises.
type AdvertisedGPU struct {
	UUID string
	NUMA int
	// MemoryMiB is what the node advertises for the GPU (memory scaling
	// applied): no slice of it may be larger.
	MemoryMiB int64
	// Parent, for a MIG instance, is its GPU's UUID: the instance is one
	// device, held whole, and healthy while its GPU is.
	Parent string
	// Profile, for a MIG instance, is its profile (1g.10gb), whose own
	// resource offers it too (ProfileServers).
	Profile string
}

// deviceID names the n-th virtual device of a GPU.
func deviceID(uuid string, n int) string { return fmt.Sprintf("%s-%d", uuid, n) }

// splitID is deviceID's inverse; UUIDs hold dashes, so the last one splits.
func splitID(id string) (string, int) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return id, -1
	}
	n, err := strconv.Atoi(id[i+1:])
	if err != nil {
		return id, -1
	}
	return id[:i], n
}

// virtualDevices lists split devices per healthy GPU, and one per MIG
// instance; unhealthy GPUs are left out, which is how kubelet learns to
// stop placing pods on them.
func virtualDevices(gpus []AdvertisedGPU, split int, unhealthy map[string]bool) []*pluginapi.Device {
	out := make([]*pluginapi.Device, 0, len(gpus)*split)
	for _, g := range gpus {
		if unhealthy[g.UUID] || (g.Parent != "" && unhealthy[g.Parent]) {
			continue
		}
		topo := &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(g.NUMA)}}}
		n := split
		if g.Parent != "" {
			n = 1
		}
		for n := range n {
			out = append(out, &pluginapi.Device{ID: deviceID(g.UUID, n), Health: pluginapi.Healthy, Topology: topo})
		}
	}
	return out
}
