package cache

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/cluster/pods"
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
// booking is in flight once MarkBound says its Binding landed.
func (c *Cache) Book(p *pods.Pod, a protocol.Assignment, raw string) uint64 {
	st := c.stateOf(p, a, raw, true)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tokens++
	st.token = c.tokens
	if old, ok := c.pods[p.UID]; ok {
		if old.shown || old.bound {
			// What the API shows, or will: a bound pod's booking is its
			// own truth, whoever bound it.
			api := old
			api.token, api.api = 0, nil // its bind is done
			st.api = &api
		} else {
			st.api = old.api // an earlier Book's, over the same
		}
	}
	c.put(p.UID, st)
	return st.token
}

// Release takes back the booking Book returned token for, when its bind
// failed: the books go back to what the API last showed of the pod (or
// to the booking of a bind that bound it). A booking since replaced
// (another bind of the pod booked it again) or shown by the API is not
// this failed bind's to take back.
func (c *Cache) Release(uid types.UID, token uint64) {
	c.mu.Lock()
	st, ok := c.pods[uid]
	release := ok && st.token == token && !st.shown
	if release {
		if st.api != nil {
			c.put(uid, *st.api)
		} else {
			c.drop(uid, false)
		}
	}
	c.mu.Unlock()
	if release && c.freed != nil {
		c.freed()
	}
}

// beneath keeps an event that predates a bind's own booking of the pod
// beneath it, and reports whether it did: the pod without a node, and
// without that booking's assignment. An unbookable assignment beneath is
// kept as none, with the error.
func (c *Cache) beneath(p *pods.Pod) (bool, error) {
	if p.NodeName != "" || !c.bindsOwnOver(p) {
		return false, nil
	}
	var api *podState
	var err error
	if p.HasAssignment {
		var a protocol.Assignment
		if a, err = c.readAssignment(p); err == nil {
			st := c.stateOf(p, a, p.Assignment, inFlightOf(p))
			st.shown = true
			api = &st
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ownOver(p) {
		return false, nil // the bind's booking went meanwhile
	}
	st := c.pods[p.UID]
	st.api = api
	c.pods[p.UID] = st
	return true, err
}

func (c *Cache) bindsOwnOver(p *pods.Pod) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ownOver(p)
}

// ownOver: the pod's booking is a bind's own that p does not show. c.mu
// held.
func (c *Cache) ownOver(p *pods.Pod) bool {
	st, ok := c.pods[p.UID]
	return ok && !st.shown && (!p.HasAssignment || st.raw != p.Assignment)
}
