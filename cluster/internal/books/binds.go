package books

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol"
)

// A bind books its pod itself (Book): as it arrives, to hold the room
// while it waits for the node's in-flight pod, and again just before its
// Binding, so the next filter already counts the pod. Until the informer
// echoes the Binding, such a booking is the bind's own. Its writes are
// all in the Binding, which sets the node, so an event that shows the pod
// without a node predates them: it must not replace or drop the booking
// (that would free the room, and the node's in-flight slot, for a second
// bind while this one lands). It is kept beneath the booking instead, and
// a bind that fails goes back to it (Release).

// Book books a as the pod's placement at once, before the informer sees
// it, and returns the token Release takes. raw is a's encoding, as the
// Binding writes it, so the informer's echo of it changes nothing. The
// booking is in flight once MarkBound says its Binding landed. held is
// the token of this bind's earlier booking of the pod (0: none). A
// booking that another bind of the pod made, and no event has shown yet,
// is that bind's: Book then books nothing and says so (kube-scheduler
// retried the pod while its first bind was under way, and that one may
// still land).
func (c *Ledger) Book(p *slimpod.Pod, a protocol.Assignment, raw string, held uint64) (token uint64, ok bool) {
	// On a node where the runtime names each container's pod, the
	// Binding writes no phase and nothing is in flight: booked as its
	// echo will show it, so that the echo changes nothing (unchanged)
	// and costs no recount of the node. Should the node stop naming
	// pods meanwhile, MarkBound holds the pod in flight.
	c.mu.RLock()
	n, known := c.nodes[a.Node]
	exact := known && n.exact
	c.mu.RUnlock()
	st := c.stateOf(p, a, raw, !exact) // its allocations outside the lock
	c.mu.Lock()
	defer c.mu.Unlock()
	old, found := c.pods[p.UID]
	switch {
	case found && !old.shown && old.token != held:
		return 0, false
	case found && (old.shown || old.bound):
		// What the API shows, or will: a bound pod's booking is its own
		// truth, whoever bound it.
		api := old
		api.token, api.api = 0, nil // its bind is done
		st.api = &api
	case found:
		st.api = old.api // this bind's earlier booking's, over the same
	}
	c.tokens++
	st.token = c.tokens
	c.shareUUIDs(&st)
	c.put(p.UID, st)
	return st.token, true
}

// Release takes back the booking Book returned token for, when its bind
// failed: the books go back to what the API last showed of the pod (or
// to the booking of a bind that bound it). A booking since replaced
// (another bind of the pod booked it again) or shown by the API is not
// this failed bind's to take back.
func (c *Ledger) Release(uid types.UID, token uint64) {
	c.mu.Lock()
	st, ok := c.pods[uid]
	release := ok && st.token == token && !st.shown
	if release {
		// Dropped first, so what the API showed comes back as it was: put
		// over the booking would keep its bound mark (MarkBound after a
		// Binding that got no answer and never landed), and a pod without
		// a node would then hold the node's in-flight slot.
		c.drop(uid, false)
		if st.api != nil {
			c.put(uid, *st.api)
		}
	}
	c.mu.Unlock()
	c.tellFreed(release)
}

// beneath keeps an event that predates a bind's own booking of the pod
// beneath that booking, and reports whether it did: the pod without a
// node, and without that booking's assignment. next is the booking the
// event shows (nil: none, or none bookable). c.mu held.
func (c *Ledger) beneath(p *slimpod.Pod, next *podState) bool {
	st, ok := c.pods[p.UID]
	if p.NodeName != "" || !ok || st.shown || (p.HasAssignment && st.raw == p.Assignment) {
		return false
	}
	st.api = next
	c.pods[p.UID] = st
	return true
}
