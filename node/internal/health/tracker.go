// Package health turns NVML XID events into GPU health: a critical XID
// marks a GPU unhealthy, and it recovers after a quiet period in which
// NVML answers for it again (HAMi and NVIDIA's plugin never recover).
package health

import (
	"slices"
	"time"
)

// DefaultIgnoredXIDs are XIDs caused by the application, not the GPU: the
// same list NVIDIA's device plugin skips.
var DefaultIgnoredXIDs = []uint64{13, 31, 43, 45, 68, 109}

// Tracker is the health state of a node's GPUs. It is pure: time and the
// NVML probe are passed in, so the rules are tested without a clock.
type Tracker struct {
	ignore []uint64
	quiet  time.Duration
	bad    map[string]time.Time // uuid -> last critical event
}

// NewTracker returns a tracker where every GPU is healthy.
func NewTracker(ignore []uint64, quiet time.Duration) *Tracker {
	return &Tracker{ignore: slices.Clone(ignore), quiet: quiet, bad: map[string]time.Time{}}
}

// Critical reports whether xid means the GPU itself is in trouble.
func (t *Tracker) Critical(xid uint64) bool {
	return !slices.Contains(t.ignore, xid)
}

// Observe records an XID on uuid at now and reports whether the GPU just
// turned unhealthy. An XID on an unhealthy GPU restarts its quiet period.
func (t *Tracker) Observe(uuid string, xid uint64, now time.Time) bool {
	if !t.Critical(xid) {
		return false
	}
	_, was := t.bad[uuid]
	t.bad[uuid] = now
	return !was
}

// Recover marks healthy every GPU whose last critical XID is at least the
// quiet period old and for which probe succeeds; it returns those GPUs.
func (t *Tracker) Recover(now time.Time, probe func(uuid string) error) []string {
	var out []string
	for uuid, last := range t.bad {
		if now.Sub(last) < t.quiet || probe(uuid) != nil {
			continue
		}
		delete(t.bad, uuid)
		out = append(out, uuid)
	}
	slices.Sort(out)
	return out
}

// Keep forgets every GPU but those in uuids: the rest left the node.
func (t *Tracker) Keep(uuids []string) {
	for uuid := range t.bad {
		if !slices.Contains(uuids, uuid) {
			delete(t.bad, uuid)
		}
	}
}

// Unhealthy returns a copy of the unhealthy set.
func (t *Tracker) Unhealthy() map[string]bool {
	out := make(map[string]bool, len(t.bad))
	for uuid := range t.bad {
		out[uuid] = true
	}
	return out
}
