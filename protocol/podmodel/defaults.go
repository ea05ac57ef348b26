package podmodel

import "github.com/vgpud/vgpud/protocol"

// MaxDefaultCores is the most cores a container that names none gets:
// one short of holding its GPU whole (Exclusive).
const MaxDefaultCores = 99

// DefaultMemMiB is the GPU memory a container that names neither gpumem
// nor gpumem-percentage gets on a GPU of gpuMiB, under the cluster's
// default percentage: the extender's books and a DRA device's request
// policy both give this.
func DefaultMemMiB(gpuMiB int64, percent int) int64 {
	return gpuMiB * int64(percent) / 100
}

// DefaultCores is the cores a container that names no gpucores gets on
// g, under the cluster's default (setting; 0 for a slot's share). Never
// 0, which a container's interposer reads as every core: a pod that
// leaves gpucores out is limited and charged like one that asks. At most
// MaxDefaultCores: holding a GPU whole (100) is what a container asks
// for, never what it is given for asking nothing, or a split-1 GPU's
// init and app containers could not share it.
func DefaultCores(g protocol.GPU, setting int) int {
	if setting > 0 {
		return min(setting, MaxDefaultCores)
	}
	return min(SlotShare(g).Cores, MaxDefaultCores)
}
