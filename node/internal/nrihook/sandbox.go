package nrihook

import (
	"context"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/apimachinery/pkg/types"
)

// StopPodSandbox forgets the pod's grants: its containers are stopped for
// good (kubelet makes a new sandbox, whose containers are granted again,
// if the pod runs on), and the runtime may remove the sandbox only a
// minute or more later. Until then the node would count what the pod's
// processes left behind as that pod's use, within its slice, while the
// leader, the pod gone, no longer books it: a GPU fuller than the books.
func (h *Hook) StopPodSandbox(_ context.Context, sb *api.PodSandbox) error {
	if h.current(sb, false) && h.granted != nil {
		h.granted.Removed(sb.GetUid())
	}
	return nil
}

// RemovePodSandbox forgets the pod.
func (h *Hook) RemovePodSandbox(_ context.Context, sb *api.PodSandbox) error {
	if h.current(sb, true) && h.granted != nil {
		h.granted.Removed(sb.GetUid())
	}
	return nil
}

// current says whether sb is its pod's newest sandbox the hook knows of
// (or the hook knows none); removed, the pod is forgotten with it. An
// older one's stop or removal (containerd stops a sandbox again as it
// removes it) leaves the pod's grants in its newer sandbox alone.
func (h *Hook) current(sb *api.PodSandbox, removed bool) bool {
	uid := types.UID(sb.GetUid())
	h.mu.Lock()
	defer h.mu.Unlock()
	if id, ok := h.sandboxes[uid]; ok && id != sb.GetId() {
		return false
	}
	if removed {
		delete(h.seen, uid)
		delete(h.sandboxes, uid)
	}
	return true
}

// static reports a pod kubelet runs from a file, by the annotation kubelet
// puts on every pod it runs.
func static(sb *api.PodSandbox) bool {
	src, ok := sb.GetAnnotations()[configSourceAnnotation]
	return ok && src != "api"
}

const configSourceAnnotation = "kubernetes.io/config.source"
