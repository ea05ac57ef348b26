package nrihook

import (
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/vgpud/vgpud/protocol"
)

// Granted is told of each container the hook grants a slice, by the
// runtime's container ID, and of each pod the runtime removes: the
// node's usage enforcement attributes GPU processes through it.
type Granted interface {
	Granted(id string, c Container, a protocol.ContainerAssignment)
	Removed(podUID string)
	// Retain forgets every container but these, the runtime's at a
	// (re)connection: what was removed while the hook was away.
	Retain(ids map[string]bool)
}

// Tell makes the hook tell g of its grants, and of the containers already
// running when it connects. Call before Run.
func (h *Hook) Tell(g Granted) { h.granted = g }

func (h *Hook) tellGranted(id string, c Container, a protocol.ContainerAssignment) {
	if h.granted != nil && id != "" {
		h.granted.Granted(id, c, a)
	}
}

// resync tells of the grants of the containers the runtime already runs
// when the hook (re)connects, as it would have at their creation: the
// same decision, from the same assignment. It waits, in the background,
// for the pod informer's first list.
func (h *Hook) resync(pods []*api.PodSandbox, ctrs []*api.Container) {
	if h.granted == nil {
		return
	}
	live := make(map[string]bool, len(ctrs))
	for _, ctr := range ctrs {
		live[ctr.GetId()] = true
	}
	h.granted.Retain(live)
	if len(ctrs) == 0 {
		return
	}
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, p := range pods {
		byID[p.GetId()] = p
	}
	type running struct {
		id string
		c  Container
	}
	var todo []running
	for _, ctr := range ctrs {
		sb := byID[ctr.GetPodSandboxId()]
		if sb == nil || ctr.GetState() == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		todo = append(todo, running{ctr.GetId(), Container{Namespace: sb.GetNamespace(), Pod: sb.GetName(), UID: sb.GetUid(), Name: ctr.GetName(), Static: static(sb)}})
	}
	go func() {
		deadline := h.clock.NewTimer(resyncWait)
		defer deadline.Stop()
		for !h.pods.HasSynced() {
			select {
			case <-h.pods.Changed():
			case <-deadline.C():
				h.log.Warn("the node's pods did not sync: running containers' slices are not measured until they restart", "containers", len(todo))
				return
			}
		}
		h.mu.Lock()
		rules := h.rules
		rules.Slice = h.slice
		h.mu.Unlock()
		for _, r := range todo {
			r.c.Known = h.pods.Get(r.c.Namespace, r.c.Pod)
			if d := Decide(r.c, rules); d.Action == Grant {
				h.tellGranted(r.id, r.c, d.Assigned)
			}
		}
	}()
}

// resyncWait bounds how long resync waits for the pod informer.
const resyncWait = 5 * time.Minute
