package podmodel

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Quota is a namespace's ResourceQuota hard limits for GPU memory (MiB) and
// GPU cores (percent), with what its pods use, both counted as PodUsage does.
type Quota struct {
	Memory Limit
	Cores  Limit
}

// Limit is one hard limit. Set is false when no ResourceQuota names it.
type Limit struct {
	Set  bool
	Hard int64
	Used int64
	// Held is, of Used, what the GPUs hold for the namespace's pods
	// beyond their bookings: memory its processes hold past a slice or
	// past their pod's end, and instances made for its ended pods that
	// processes keep.
	Held int64
}

// held is how a message says what of Used is held beyond bookings.
func (l Limit) held() string {
	if l.Held <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of it held beyond the pods' slices by their processes, some past their pods' end, charged until the driver frees it)", l.Held)
}

// PodUsage is what pod counts against quota: the footprint rule over its
// requests (init containers at peak, sidecars for the pod's life, app
// containers summed), memory and cores per GPU times the GPU count, since
// native quota sees one gpumem value however many GPUs share it; a GPU
// held whole counts at least wholeGPU MiB (Requested).
func PodUsage(pod *corev1.Pod, names wellknown.ResourceNames, wholeGPU int64) (Usage, error) {
	cs, err := Requests(pod, names)
	if err != nil {
		return Usage{}, err
	}
	// Only whether it holds GPUs alone matters here, which no default
	// changes: the cluster's default chain never names mutex.
	policy, err := GPUPolicyOf(pod.Annotations, "")
	if err != nil {
		return Usage{}, err
	}
	return Requested(cs, wholeGPU, policy.Mutex), nil
}

// Check returns a message naming the exceeded limit and what to change, or
// "" when ask fits.
func CheckQuota(namespace string, q Quota, ask Usage, names wellknown.ResourceNames) string {
	if q.Memory.Set && ask.MemMiB > 0 && q.Memory.Used+ask.MemMiB > q.Memory.Hard {
		whole := ""
		switch {
		case ask.Mutex:
			whole = ", each GPU it holds alone by the mutex policy counting its whole memory (leave mutex out to be charged the slice)"
		case ask.Exclusive:
			whole = fmt.Sprintf(", a GPU with all its cores (%s 100) counting its whole memory", names.GPUCores)
		}
		return fmt.Sprintf("namespace %s: gpumem quota %d MiB, in use %d%s, this pod is charged %d%s; lower %s or %s (charged per GPU times %s, and at least a slot's share of each GPU: its memory divided by its split) or raise the ResourceQuota",
			namespace, q.Memory.Hard, q.Memory.Used, q.Memory.held(), ask.MemMiB, whole, names.GPUMem, names.GPUMemPercentage, names.GPU)
	}
	if cores := int64(ask.Cores); q.Cores.Set && cores > 0 && q.Cores.Used+cores > q.Cores.Hard {
		whole := ""
		if ask.Mutex {
			whole = ", each GPU it holds alone by the mutex policy counting every core (leave mutex out to be charged the slice)"
		}
		return fmt.Sprintf("namespace %s: gpucores quota %d, in use %d%s, this pod is charged %d%s; lower %s (charged per GPU times %s, every core of a GPU held whole, with all its cores or all its memory, and at least a slot's share of each GPU: its cores divided by its split, also for a container that names none) or raise the ResourceQuota",
			namespace, q.Cores.Hard, q.Cores.Used, q.Cores.held(), cores, whole, names.GPUCores, names.GPU)
	}
	return ""
}
