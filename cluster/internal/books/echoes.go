package books

import "github.com/vgpud/vgpud/cluster/internal/slimpod"

// Every bind comes back through the informer (the Binding, then the
// node role's allocation record): events that show a booking as it is,
// or change only whether its pod is in flight, are applied here without
// a decode of the assignment or a recount of the node.

// unchanged reports whether p's event would change nothing in its
// booking: the same assignment, already checked when booked, on the node
// it names, in the same state. Every bind echoes back through the
// informer twice (Binding, allocation); those echoes, once the bind has
// marked its pod bound, cost a map lookup instead of a decode and a
// recompute.
func (c *Ledger) unchanged(p *slimpod.Pod, raw string, inFlight bool) bool {
	c.mu.RLock()
	old, ok := c.pods[p.UID]
	same := ok && old.raw == raw && old.inFlight == inFlight && old.name == p.Name &&
		(p.NodeName == "" || (p.NodeName == old.node && old.bound))
	c.mu.RUnlock()
	if same && !old.shown {
		// The echo of a bind's own booking: shown from now on.
		c.mu.Lock()
		if cur, ok := c.pods[p.UID]; ok && cur.raw == raw {
			cur.shown, cur.token, cur.api = true, 0, nil
			c.pods[p.UID] = cur
		}
		c.mu.Unlock()
	}
	return same
}

// reflag applies an event that shows the pod bound to the node of its
// booking, with the same assignment, changed only in whether it is in
// flight (the node role's allocation record, once per bind): as the full
// path would book it, without the decode, or a recount of the node's
// usage, which the same assignment leaves as it was. It reports whether
// it did. Like unchanged, it does not check the assignment again: it was
// when booked.
func (c *Ledger) reflag(p *slimpod.Pod, raw string, inFlight bool) bool {
	applies := func() (podState, bool) {
		old, ok := c.pods[p.UID]
		return old, ok && old.raw == raw && old.name == p.Name && p.NodeName != "" && p.NodeName == old.node
	}
	c.mu.RLock()
	_, ok := applies() // most events that get here book a new assignment
	c.mu.RUnlock()
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := applies()
	if !ok {
		return false
	}
	old.inFlight, old.bound = inFlight, true
	old.shown, old.token, old.api = true, 0, nil
	c.setUnhonoured(p, nil)
	c.pods[p.UID] = old
	c.refreshInFlight(old.node)
	return true
}
