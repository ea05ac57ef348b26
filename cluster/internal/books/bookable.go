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
// defence in depth. A slice on a GPU the node no longer lists (it was
// removed, or fell off the bus, after the bind) does not make the rest
// unbookable once the pod is bound, or while some GPU of the pod is
// still there: the pod holds those, which must stay booked, and the one
// gone counts again if it returns (Gone names the missing ones, for the
// report). An unbound pod naming none of the node's GPUs is refused.
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
	// Bound, or holding some GPU still there: vgpud's own bind wrote it
	// when its GPUs were there (the apiserver lets no one else), and
	// booked it stays, holding nothing on a GPU gone until it returns.
	holds := podNode != "" || len(Gone(a, gpus)) < len(a.GPUs())
	memoryOf := func(uuid string) (int64, bool) {
		if mem, ok := gpuMemory(gpus, uuid); ok || !holds {
			return mem, ok
		}
		return protocol.MaxMemoryMiB, true // gone: nothing is booked there (fit.Add)
	}
	if err := protocol.CheckSlices(a.Containers, memoryOf); err != nil {
		return fmt.Errorf("assignment not booked on node %s: %w", a.Node, err)
	}
	return nil
}

// Gone is the GPUs a holds that gpus, its node's GPUs now, does not list.
func Gone(a protocol.Assignment, gpus []protocol.GPU) []string {
	var out []string
	for _, uuid := range a.GPUs() {
		if _, ok := gpuMemory(gpus, uuid); !ok {
			out = append(out, uuid)
		}
	}
	return out
}

// gpuMemory is the memory of GPU uuid among gpus, and whether it is there.
func gpuMemory(gpus []protocol.GPU, uuid string) (int64, bool) {
	i := slices.IndexFunc(gpus, func(g protocol.GPU) bool { return g.UUID == uuid })
	if i < 0 {
		return 0, false
	}
	return gpus[i].MemoryMiB, true
}
