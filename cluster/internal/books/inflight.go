package books

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// A node takes one bound pod at a time: kubelet's Allocate carries only
// device counts, so while a pod bound there is not yet allocated, a second
// one could be handed its GPUs. These keep each node's in-flight pods.

// flying names one in-flight pod of a node.
type flying struct {
	uid  types.UID
	name string // namespace/name
}

// MarkBound records that the pod's Binding to node succeeded, before the
// informer shows it: from now on it holds the node's in-flight slot while
// it is in flight. It changes nothing else, so an informer event that
// already said "allocated" is not undone.
func (c *Ledger) MarkBound(uid types.UID, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pods[uid]; ok && p.node == node {
		p.bound = true
		st, known := c.nodes[node]
		guessing := !known || !st.exact
		if guessing && !p.shown {
			// Booked while the node was exact (not in flight), which it no
			// longer is: the slot is held until the echo says otherwise.
			p.inFlight = true
		}
		c.pods[uid] = p
		if guessing {
			c.refreshInFlight(node) // an exact node has no in-flight slot
		}
	}
}

// KeepDeletedInFlight makes a pod deleted while in flight (bound, not yet
// allocated) hold its node's in-flight slot for d more: kubelet may still
// be admitting it, and Allocate, which carries no pod identity, must not
// meet a second bound pod then. Call before use.
func (c *Ledger) KeepDeletedInFlight(d time.Duration) { c.deletedInFlight = d }

// InFlight names a pod on node, other than except, that is bound but not
// yet allocated; "" if there is none.
func (c *Ledger) InFlight(node string, except types.UID) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	st, ok := c.nodes[node]
	if !ok || st.exact {
		return ""
	}
	var names []string
	for _, f := range st.inFlight {
		if f.uid != except {
			names = append(names, f.name)
		}
	}
	now := c.clock.Now()
	for name, until := range st.gone {
		if now.Before(until) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// InFlightChanged returns a channel closed when the node's in-flight pods
// are next recounted: take it before InFlight, and wait on it instead of
// polling. (A pod deleted in flight leaves the slot by the clock, with no
// recount: waiters also look again now and then.)
func (c *Ledger) InFlightChanged(node string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.node(node)
	if st.changed == nil {
		st.changed = make(chan struct{})
	}
	return st.changed
}

// refreshInFlight recounts the node's in-flight pods after a change, and
// wakes the binds waiting on them.
func (c *Ledger) refreshInFlight(name string) {
	st := c.node(name)
	if st.changed != nil {
		close(st.changed)
		st.changed = nil
	}
	st.inFlight = st.inFlight[:0]
	for uid := range st.pods {
		// A booking without a node, or without a GPU, is no Allocate
		// kubelet will make.
		if p := c.pods[uid]; p.inFlight && p.bound && p.placement.HoldsGPU() {
			st.inFlight = append(st.inFlight, flying{uid: uid, name: p.namespace + "/" + p.name})
		}
	}
}

// NamesPods reports whether the runtime names each container's pod on
// node (NRI): there a bind waits for no other pod, and writes no phase.
func (c *Ledger) NamesPods(node string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	st, ok := c.nodes[node]
	return ok && st.exact
}
