package plugin

import (
	"fmt"
	"os"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpud/vgpud/node/grant"
	"github.com/vgpud/vgpud/protocol"
)

// containerResponse is the env and mounts of one container's share, as
// the guessing path hands it to kubelet.
func containerResponse(t target, resources protocol.ResourceNames, o grant.Options) (*pluginapi.ContainerAllocateResponse, error) {
	s := grant.For(t.container, string(t.pod.UID), grant.Priority(t.spec, resources), o)
	if s.CacheDir != "" {
		if err := os.MkdirAll(s.CacheDir, 0o777); err != nil {
			return nil, fmt.Errorf("create the interposer's cache directory: %w", err)
		}
	}
	resp := &pluginapi.ContainerAllocateResponse{Envs: s.Env}
	for _, m := range s.Mounts {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{HostPath: m.Host, ContainerPath: m.Container, ReadOnly: m.ReadOnly})
	}
	return resp, nil
}

// voidResponse is Allocate's answer where the runtime names the pod: no
// GPU, which only the runtime hook raises to the container's slice, so a
// container the hook never saw gets none.
func voidResponse() *pluginapi.ContainerAllocateResponse {
	return &pluginapi.ContainerAllocateResponse{Envs: map[string]string{protocol.EnvVisibleDevices: grant.Void}}
}
