package books

import (
	"fmt"

	"github.com/vgpud/vgpud/cluster/podrecord"
	"github.com/vgpud/vgpud/protocol"
)

// hamiRaw starts the raw form of a booking read from HAMi's record.
const hamiRaw = "hami\n"

// readHAMi reads the record HAMi's scheduler left on a pod it placed
// (BookableHAMi's rule) as the assignment to book.
func (c *Cache) readHAMi(p *podrecord.Pod) (protocol.Assignment, error) {
	c.mu.RLock()
	var gpus []protocol.GPU
	if st, ok := c.nodes[HAMiNode(p.NodeName, p.HAMiNode)]; ok {
		gpus = st.gpus
	}
	c.mu.RUnlock()
	a, err := BookableHAMi(p.NodeName, p.HAMiNode, p.HAMiAllocated, gpus)
	if err != nil {
		return protocol.Assignment{}, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return a, nil
}

// HAMiNode is the node of a pod HAMi placed: the one it is bound to, else
// the one HAMi's scheduler chose.
func HAMiNode(podNode, hamiNode string) string {
	if podNode != "" {
		return podNode
	}
	return hamiNode
}

// BookableHAMi is HAMi's record raw, of a pod bound to podNode ("" if
// not) and placed by HAMi on hamiNode, as an assignment vgpud books, or
// why it books none. gpus are the node's GPUs as vgpud knows them (nil:
// not known yet). Only HAMi's scheduler could write the record (the
// manifest's vgpud-hami-records policy refuses it to everyone else), so
// it is read like vgpud's own: its node and GPUs must be the pod's. The
// view (`vgpud inspect --cluster`) counts by the same rule.
func BookableHAMi(podNode, hamiNode, raw string, gpus []protocol.GPU) (protocol.Assignment, error) {
	if podNode != "" && hamiNode != "" && podNode != hamiNode {
		return protocol.Assignment{}, fmt.Errorf("HAMi's record not booked: it names node %s but the pod is bound to %s", hamiNode, podNode)
	}
	node := HAMiNode(podNode, hamiNode)
	if node == "" {
		return protocol.Assignment{}, fmt.Errorf("HAMi's record not booked: the pod is bound to no node and %s names none", protocol.AnnotationHAMiNode)
	}
	a, err := protocol.DecodeHAMiAllocation(raw, node)
	if err != nil {
		return protocol.Assignment{}, fmt.Errorf("HAMi's record not booked: %w", err)
	}
	if len(gpus) > 0 {
		if err := protocol.CheckSlices(a.Containers, func(uuid string) (int64, bool) { return gpuMemory(gpus, uuid) }); err != nil {
			return protocol.Assignment{}, fmt.Errorf("HAMi's record not booked on node %s: %w", node, err)
		}
	}
	return a, nil
}
