package nrihook

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/vgpud/vgpud/protocol/containerenv"
)

// InstanceMaker is what the hook asks of the node's MIG maker (migmaker.Maker):
// the MIG device made for a possible instance, and when that may have
// changed.
type InstanceMaker interface {
	// Made is the device made for instance id for pod, as
	// namespace/name/uid, checked on its GPU since the node's start.
	Made(id, pod string) (uuid string, ok bool)
	// Recorded is the device the record says was made for it, checked
	// or not: what a container running from before the start was given.
	Recorded(id, pod string) (uuid string, ok bool)
	Changed() <-chan struct{}
}

// SetMaker gives the hook the node's MIG maker, once the node's GPUs
// are known; until then, and on a node that makes no instances, a
// container whose slice is one to make is refused.
func (h *Hook) SetMaker(m InstanceMaker) {
	h.mu.Lock()
	h.maker = m
	pending := h.pending
	h.pending = nil
	rules := h.rules
	rules.Slice = h.slice
	h.mu.Unlock()
	// Containers found running on made instances when the hook
	// connected, judged now that the record can name their devices.
	for _, r := range pending {
		if !h.judge(r, rules) {
			h.log.Warn("a running container's MIG instance made on demand is not in the record: not measured until it restarts", "pod", r.c.Namespace+"/"+r.c.Pod, "container", r.c.Name)
		}
	}
}

// resolveMade turns a grant of instances the node makes (GPUSlice.Make)
// into one of their MIG devices, waiting within the call's deadline for
// the maker, which starts on them as soon as the node's informer sees
// the pod bound. Anything else is returned as it is.
func (h *Hook) resolveMade(ctx context.Context, d Decision, c NamedContainer) Decision {
	name, pod := c.Name, c.key()
	if d.Action != Grant || !d.Assigned.Makes() {
		return d
	}
	h.mu.Lock()
	m := h.maker
	h.mu.Unlock()
	if m == nil {
		return Decision{Action: Refuse, Reason: fmt.Sprintf("container %q is assigned a MIG instance to make, and vgpud on node %s makes none (yet, or --mig-on-demand is off); kubelet retries the container", name, h.rules.Node)}
	}
	deadline := h.clock.NewTimer(h.callWait(ctx))
	defer deadline.Stop()
	for {
		changed := m.Changed()
		resolved, missing := substitute(d, func(id string) (string, bool) { return m.Made(id, pod) })
		if missing == "" {
			return resolved
		}
		select {
		case <-changed:
		case <-deadline.C():
			return Decision{Action: Refuse, Reason: fmt.Sprintf("container %q is assigned MIG instance %s, which vgpud on node %s has not made yet; kubelet retries the container", name, missing, h.rules.Node)}
		case <-ctx.Done():
			return Decision{Action: Refuse, Reason: fmt.Sprintf("container %q: the runtime's call ended while vgpud made MIG instance %s", name, missing)}
		}
	}
}

// substitute is d with each slice to make named by its MIG device
// (lookup), or the first lookup lacks.
func substitute(d Decision, lookup func(id string) (string, bool)) (Decision, string) {
	gpus := slices.Clone(d.Assigned.GPUs)
	uuids := make([]string, len(gpus))
	for i, s := range gpus {
		if s.Make {
			uuid, ok := lookup(s.UUID)
			if !ok {
				return d, s.UUID
			}
			gpus[i].UUID = uuid
		}
		uuids[i] = gpus[i].UUID
	}
	d.Assigned.GPUs = gpus
	d.Slice.Env = maps.Clone(d.Slice.Env)
	d.Slice.Env[containerenv.EnvVisibleDevices] = strings.Join(uuids, ",")
	return d, ""
}

// recorded is d, for a container found running when the hook connects,
// with each slice to make named by the device the record says was made
// for it; ok false where that cannot be told (no maker yet, no record
// of it): then nothing is ended on a guess.
func (h *Hook) recorded(d Decision, c NamedContainer) (Decision, bool) {
	if d.Action != Grant || !d.Assigned.Makes() {
		return d, true
	}
	h.mu.Lock()
	m := h.maker
	h.mu.Unlock()
	if m == nil {
		return d, false
	}
	pod := c.key()
	out, missing := substitute(d, func(id string) (string, bool) { return m.Recorded(id, pod) })
	return out, missing == ""
}

// key names c's pod as the maker's record does: namespace/name/uid.
func (c NamedContainer) key() string { return c.Namespace + "/" + c.Pod + "/" + c.UID }
