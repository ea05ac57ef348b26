package plugin

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpud/vgpud/podmodel"
	"github.com/vgpud/vgpud/protocol"
)

// Where the interposer's files appear inside a container. HAMi-core reads
// the same paths, so images built for HAMi work unchanged.
const (
	containerLib     = "/usr/local/vgpu/libvgpu.so"
	containerPreload = "/etc/ld.so.preload"
	containerCache   = "/usr/local/vgpu/cache"
	interposerLib    = "libvgpu.so"
	interposerLoad   = "ld.so.preload"
)

// envOptions is what, besides the assignment, shapes a container's env.
type envOptions struct {
	resources     protocol.ResourceNames
	oversubscribe bool   // memory scaling above 1
	interposer    string // host directory holding libvgpu.so; "" for none
}

// containerResponse is the env and mounts of one container's share.
func containerResponse(t target, o envOptions) (*pluginapi.ContainerAllocateResponse, error) {
	gpus := t.container.GPUs
	uuids := make([]string, len(gpus))
	env := make(map[string]string, len(gpus)+5)
	for i, g := range gpus {
		uuids[i] = g.UUID
		env[protocol.EnvMemoryLimitPrefix+strconv.Itoa(i)] = fmt.Sprintf("%dm", g.MemoryMiB)
	}
	env[protocol.EnvVisibleDevices] = strings.Join(uuids, ",")
	// One SM limit per container: the leader gives every GPU of a
	// container the same cores.
	env[protocol.EnvSMLimit] = strconv.Itoa(gpus[0].Cores)
	if o.oversubscribe {
		env[protocol.EnvOversubscribe] = "true"
	}
	if t.spec != nil {
		r, err := podmodel.ContainerRequestOf(t.spec, o.resources)
		if err == nil && r.HasPriority {
			env[protocol.EnvTaskPriority] = strconv.Itoa(r.Priority)
		}
	}
	resp := &pluginapi.ContainerAllocateResponse{Envs: env}
	if o.interposer != "" {
		cache := filepath.Join(o.interposer, "containers", string(t.pod.UID)+"_"+t.container.Name)
		if err := os.MkdirAll(cache, 0o777); err != nil {
			return nil, fmt.Errorf("create the interposer's cache directory: %w", err)
		}
		env[protocol.EnvSharedCache] = containerCache + "/" + string(t.pod.UID) + ".cache"
		resp.Mounts = []*pluginapi.Mount{
			{HostPath: filepath.Join(o.interposer, interposerLib), ContainerPath: containerLib, ReadOnly: true},
			{HostPath: filepath.Join(o.interposer, interposerLoad), ContainerPath: containerPreload, ReadOnly: true},
			{HostPath: cache, ContainerPath: containerCache},
		}
	}
	return resp, nil
}

// PrepareInterposer checks that dir holds libvgpu.so and writes the
// ld.so.preload that makes every process in the container load it.
func PrepareInterposer(dir string) error {
	lib := filepath.Join(dir, interposerLib)
	if _, err := os.Stat(lib); err != nil {
		return fmt.Errorf("interposer: %w; put HAMi-core's libvgpu.so there or leave --interposer-dir empty", err)
	}
	if err := os.WriteFile(filepath.Join(dir, interposerLoad), []byte(containerLib+"\n"), 0o644); err != nil {
		return fmt.Errorf("interposer: %w", err)
	}
	return nil
}
