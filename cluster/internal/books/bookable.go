package books

import (
	"fmt"
	"slices"

	"github.com/vgpud/vgpud/protocol"
)

// Bookable says whether assignment a, on a pod of scheduler podScheduler
// bound to podNode ("" if unbound), is one vgpud's own bind for scheduler
// could have written, with slices that fit gpus, its node's GPUs as vgpud
// knows them (nil: not known; that node's own Allocate checks the same
// against the hardware). The books book nothing else, and `vgpud inspect
// --cluster` counts nothing else. The apiserver already refuses the
// annotation from anyone but vgpud (the manifest's policies): this is
// defence in depth.
func Bookable(scheduler, podScheduler, podNode string, a protocol.Assignment, gpus []protocol.GPU) error {
	if podScheduler != scheduler {
		return fmt.Errorf("assignment not booked: schedulerName %q is not %q, and only vgpud binds write assignments", podScheduler, scheduler)
	}
	if podNode != "" && podNode != a.Node {
		return fmt.Errorf("assignment not booked: it names node %s but the pod is bound to %s", a.Node, podNode)
	}
	if len(gpus) == 0 {
		return nil
	}
	if err := protocol.CheckSlices(a.Containers, func(uuid string) (int64, bool) { return gpuMemory(gpus, uuid) }); err != nil {
		return fmt.Errorf("assignment not booked on node %s: %w", a.Node, err)
	}
	return nil
}

// gpuMemory is the memory of GPU uuid among gpus, and whether it is there.
func gpuMemory(gpus []protocol.GPU, uuid string) (int64, bool) {
	i := slices.IndexFunc(gpus, func(g protocol.GPU) bool { return g.UUID == uuid })
	if i < 0 {
		return 0, false
	}
	return gpus[i].MemoryMiB, true
}
