package webhook

import (
	"fmt"

	"github.com/vgpud/vgpud/protocol"
)

// Quotas gives a namespace's vGPU quota and what its pods already use; the
// cluster role's cache implements it.
type Quotas interface {
	NamespaceQuota(namespace string) Quota
}

// Quota is a namespace's ResourceQuota hard limits for GPU memory (MiB, per
// GPU times count) and GPU cores (percent, per GPU times count), with usage.
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

// podAsk is what a pod counts against quota: memory and cores per GPU times
// the GPU count. Init containers run one at a time before the app
// containers, so like ResourceQuota the pod asks the larger of the biggest
// init container and the sum of the app containers.
func podAsk(reqs []protocol.ContainerRequest) (memMiB, cores int64) {
	var initMem, initCores, appMem, appCores int64
	for _, r := range reqs {
		m, c := r.MemoryMiB*int64(r.GPUs), int64(r.Cores)*int64(r.GPUs)
		if r.Init {
			initMem, initCores = max(initMem, m), max(initCores, c)
		} else {
			appMem, appCores = appMem+m, appCores+c
		}
	}
	return max(initMem, appMem), max(initCores, appCores)
}

// checkQuota returns a message naming the exceeded limit, or "" when the
// pod fits. Memory given as a percentage is not counted: its size in MiB
// depends on the GPU the scheduler picks.
func checkQuota(namespace string, q Quota, reqs []protocol.ContainerRequest, names protocol.ResourceNames) string {
	mem, cores := podAsk(reqs)
	if q.Memory.Set && mem > 0 && q.Memory.Used+mem > q.Memory.Hard {
		return fmt.Sprintf("namespace %s: gpumem quota %d MiB, in use %d, this pod asks %d; lower %s (counted per GPU times %s) or raise the ResourceQuota",
			namespace, q.Memory.Hard, q.Memory.Used, mem, names.GPUMem, names.GPU)
	}
	if q.Cores.Set && cores > 0 && q.Cores.Used+cores > q.Cores.Hard {
		return fmt.Sprintf("namespace %s: gpucores quota %d, in use %d, this pod asks %d; lower %s (counted per GPU times %s) or raise the ResourceQuota",
			namespace, q.Cores.Hard, q.Cores.Used, cores, names.GPUCores, names.GPU)
	}
	return ""
}
