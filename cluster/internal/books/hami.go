package books

import (
	"fmt"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/hamirecord"
)

// hamiRaw starts the raw form of a booking read from HAMi's record.
const hamiRaw = "hami\n"

// readHAMi reads the record HAMi's scheduler left on a pod it placed
// (BookableHAMi's rule) as the assignment to book.
func (c *Ledger) readHAMi(p *slimpod.Pod) (protocol.Assignment, error) {
	c.mu.RLock()
	var gpus []protocol.GPU
	var mig map[string]*protocol.MIGRef
	if st, ok := c.nodes[p.NodeName]; ok {
		gpus, mig = st.gpus, st.mig
	}
	c.mu.RUnlock()
	a, err := BookableHAMi(p.NodeName, p.HAMiNode, p.HAMiAllocated, gpus, mig)
	if err != nil {
		return protocol.Assignment{}, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return a, nil
}

// BookableHAMi is HAMi's record raw, of a pod bound to podNode ("" if
// not) and placed by HAMi on hamiNode, as an assignment vgpud books, or
// why it books none. gpus are the node's GPUs as vgpud knows them (nil:
// not known yet). Only HAMi's scheduler could write the record (the
// manifest's vgpud-hami-records policy refuses it to everyone else), so
// what it holds is booked, erring towards booking more: a slice larger
// than its GPU (HAMi's memory scaling) holds the whole GPU, and one on a
// GPU the node does not have is left out, since vgpud places nothing
// there, and one on a GPU in MIG mode (mig: what each instance is part
// of) holds every instance of it. A pod HAMi never bound holds nothing: with
// HAMi's scheduler stopped it never will be. The view (`vgpud inspect
// --cluster`) counts by the same rule.
func BookableHAMi(podNode, hamiNode, raw string, gpus []protocol.GPU, mig map[string]*protocol.MIGRef) (protocol.Assignment, error) {
	if podNode == "" {
		return protocol.Assignment{}, fmt.Errorf("HAMi's record not booked: HAMi's scheduler never bound the pod; delete it, or it waits for HAMi for ever")
	}
	if hamiNode != "" && podNode != hamiNode {
		return protocol.Assignment{}, fmt.Errorf("HAMi's record not booked: it names node %.253s but the pod is bound to %s", hamiNode, podNode)
	}
	a, err := hamirecord.DecodeHAMiAllocation(raw, podNode)
	if err != nil {
		return protocol.Assignment{}, fmt.Errorf("HAMi's record not booked: %w", err)
	}
	if len(gpus) == 0 {
		return a, nil
	}
	kept := a.Containers[:0]
	for _, c := range a.Containers {
		// A fresh list: a GPU in MIG mode stands for several slices.
		slices := make([]protocol.GPUSlice, 0, len(c.GPUs))
		for _, s := range c.GPUs {
			mem, ok := gpuMemory(gpus, s.UUID)
			if !ok {
				slices = append(slices, onParent(s, gpus, mig)...)
				continue
			}
			s.MemoryMiB = min(s.MemoryMiB, mem)
			slices = append(slices, s)
		}
		if len(slices) > 0 {
			c.GPUs = slices
			kept = append(kept, c)
		}
	}
	a.Containers = kept
	return a, nil
}
