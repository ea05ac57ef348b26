package webhook

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/protocol"
)

// Quotas gives a namespace's vGPU quota and what its pods already use; the
// cluster role's cache implements it, summing PodUsage over live pods.
type Quotas interface {
	NamespaceQuota(namespace string) Quota
}

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
}

// Usage is what one pod counts against quota.
type Usage struct {
	MemoryMiB int64
	Cores     int64
}

// PodUsage is what pod counts against quota: memory and cores per GPU times
// the GPU count, since native quota sees one gpumem value however many GPUs
// share it. Like ResourceQuota it counts the pod's peak: init containers
// run one at a time, each beside the sidecars (restartPolicy Always) started
// before it, and the app containers run together with every sidecar.
// Memory given as a percentage is not counted: its size in MiB depends on
// the GPU the scheduler picks.
func PodUsage(pod *corev1.Pod, names protocol.ResourceNames) (Usage, error) {
	var sidecars, peak, apps Usage
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		u, err := containerUsage(c, names)
		if err != nil {
			return Usage{}, err
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars = sidecars.plus(u)
			peak = peak.max(sidecars)
		} else {
			peak = peak.max(sidecars.plus(u))
		}
	}
	for i := range pod.Spec.Containers {
		u, err := containerUsage(&pod.Spec.Containers[i], names)
		if err != nil {
			return Usage{}, err
		}
		apps = apps.plus(u)
	}
	return peak.max(sidecars.plus(apps)), nil
}

func containerUsage(c *corev1.Container, names protocol.ResourceNames) (Usage, error) {
	r, err := protocol.ContainerRequestOf(c, names)
	if err != nil {
		return Usage{}, err
	}
	return Usage{MemoryMiB: r.MemoryMiB * int64(r.GPUs), Cores: int64(r.Cores) * int64(r.GPUs)}, nil
}

func (u Usage) plus(o Usage) Usage {
	return Usage{MemoryMiB: u.MemoryMiB + o.MemoryMiB, Cores: u.Cores + o.Cores}
}

func (u Usage) max(o Usage) Usage {
	return Usage{MemoryMiB: max(u.MemoryMiB, o.MemoryMiB), Cores: max(u.Cores, o.Cores)}
}

// checkQuota returns a message naming the exceeded limit, or "" when ask fits.
func checkQuota(namespace string, q Quota, ask Usage, names protocol.ResourceNames) string {
	if q.Memory.Set && ask.MemoryMiB > 0 && q.Memory.Used+ask.MemoryMiB > q.Memory.Hard {
		return fmt.Sprintf("namespace %s: gpumem quota %d MiB, in use %d, this pod asks %d; lower %s (counted per GPU times %s) or raise the ResourceQuota",
			namespace, q.Memory.Hard, q.Memory.Used, ask.MemoryMiB, names.GPUMem, names.GPU)
	}
	if q.Cores.Set && ask.Cores > 0 && q.Cores.Used+ask.Cores > q.Cores.Hard {
		return fmt.Sprintf("namespace %s: gpucores quota %d, in use %d, this pod asks %d; lower %s (counted per GPU times %s) or raise the ResourceQuota",
			namespace, q.Cores.Hard, q.Cores.Used, ask.Cores, names.GPUCores, names.GPU)
	}
	return ""
}
