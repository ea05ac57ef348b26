package deviceplugin

import (
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpud/vgpud/node/internal/grant"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// containerResponse is the env and mounts of one container's share, as
// the guessing path hands it to kubelet.
func containerResponse(t target, resources wellknown.ResourceNames, o grant.Shape) (*pluginapi.ContainerAllocateResponse, error) {
	s := grant.For(t.container, string(t.pod.UID), grant.Priority(t.spec, resources), o)
	if err := grant.MakeCacheDir(s); err != nil {
		return nil, err
	}
	resp := &pluginapi.ContainerAllocateResponse{Envs: s.Env}
	for _, m := range s.Mounts {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{HostPath: m.Host, ContainerPath: m.Container, ReadOnly: m.ReadOnly})
	}
	if s.CacheDir != "" {
		// kubelet can mount only host paths: a directory on the node's
		// disk, unbounded, swept once the pod is gone (README).
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{HostPath: s.CacheDir, ContainerPath: s.Cache})
	}
	return resp, nil
}

// bookkeepingResponse is Allocate's answer where the runtime names the
// pod: nothing at all. The runtime hook sets each container's GPUs, and
// the runtime's NRI validator creates no container without the hook.
// Not even NVIDIA_VISIBLE_DEVICES=void: containerd appends the image's
// env and kubelet's device env without merging them, and NRI replaces
// only a variable's first occurrence, so a void here would outlive the
// hook's grant to any container whose image sets the variable (every
// CUDA base image).
func bookkeepingResponse() *pluginapi.ContainerAllocateResponse {
	return &pluginapi.ContainerAllocateResponse{}
}
