package nrihook

import (
	"context"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/vgpud/vgpud/node/internal/grant"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/containerenv"
)

// Granted is told of each container the hook grants a slice, by the
// runtime's container ID, and of each pod the runtime removes: the
// node's usage enforcement attributes GPU processes through it.
type Granted interface {
	Granted(id string, c NamedContainer, a protocol.ContainerAssignment)
	Removed(podUID string)
	// Retain forgets every container but these, the runtime's at a
	// (re)connection: what was removed while the hook was away.
	Retain(ids map[string]bool)
}

// Tell makes the hook tell g of its grants, and of the containers already
// running when it connects. Call before Run.
func (h *Hook) Tell(g Granted) { h.granted = g }

// EvictWith makes the hook end, at a (re)connection, each running
// container whose env is not what the hook would have set: one the
// runtime created while the hook was being killed mid-call. containerd's
// NRI counts a plugin that dies during CreateContainer as consulted, so
// its validator lets the container through without the hook's
// adjustment: no slice, or an image's NVIDIA_VISIBLE_DEVICES=all. Ended,
// it restarts under its pod's restart policy, through the hook. evict
// gets the runtime's container ID and its first process's host PID.
// Call before Run.
func (h *Hook) EvictWith(evict func(id string, pid int) error) { h.evict = evict }

// escaped reports whether env (the container's, as the runtime created
// it) lacks the devices d would have set: the granted GPUs, or "void".
func escaped(d Decision, ctr *api.Container, rules Ruleset) bool {
	env := ctr.GetEnv()
	want := ""
	switch d.Action {
	case Grant:
		want = d.Slice.Env[containerenv.EnvVisibleDevices]
	case Void:
		want = grant.Void
	case Keep:
		return len(beyondHAMi(ctr, d.Devices, rules.MIGParent)) > 0
	default:
		return false
	}
	// What CreateContainer refuses: device nodes, device rules and CDI
	// devices that reach a GPU outside the books (the grant's own CDI
	// devices are inside them). Where the node cannot tell which devices
	// the grant brought (the runtime not read, the GPUs not discovered,
	// the spec unreadable now), a device is no sign: the env alone is.
	granted, err := cdiFor(d, rules)
	known := err == nil && (d.Action != Grant || rules.CDI == nil || rules.CDIKnown == nil || rules.CDIKnown())
	if known && len(foreignGPUs(ctr, granted)) > 0 {
		return true
	}
	if len(env) == 0 {
		return false // the runtime did not say: never end a container on a guess
	}
	got, set := "", false
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == containerenv.EnvVisibleDevices {
			got, set = v, true
		}
	}
	if d.Action == Void {
		// No device env at all exposes no GPU either.
		return set && got != grant.Void && got != containerenv.VisibleDevicesNone
	}
	return got != want
}

func (h *Hook) tellGranted(id string, c NamedContainer, a protocol.ContainerAssignment) {
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
	var todo []running
	for _, ctr := range ctrs {
		sb := byID[ctr.GetPodSandboxId()]
		if sb == nil || ctr.GetState() == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		todo = append(todo, running{ctr.GetId(), NamedContainer{Namespace: sb.GetNamespace(), Pod: sb.GetName(), UID: sb.GetUid(), Name: ctr.GetName(), Static: static(sb)}, ctr, int(ctr.GetPid())})
	}
	go func() {
		deadline := h.clock.NewTimer(resyncWait)
		defer deadline.Stop()
		// The namespaces labelled for GPU agents decide too: a container
		// judged before they are in would be left as it runs.
		for !h.pods.HasSynced() || (h.rules.AgentsSynced != nil && !h.rules.AgentsSynced()) || (h.rules.CDIKnown != nil && !h.rules.CDIKnown()) {
			select {
			case <-h.pods.Changed():
			case <-h.clock.After(resyncPoll):
			case <-deadline.C():
				h.log.Warn("the node's pods or the namespaces labelled for GPU agents did not sync: running containers are not judged, nor their slices measured, until they restart", "containers", len(todo))
				return
			}
		}
		h.mu.Lock()
		rules := h.rules
		rules.Slice = h.slice
		h.mu.Unlock()
		var later []running
		for _, r := range todo {
			if !h.judge(r, rules) {
				later = append(later, r)
			}
		}
		h.mu.Lock()
		if h.maker == nil {
			h.pending = later
			later = nil
		}
		h.mu.Unlock()
		for _, r := range later { // the maker came meanwhile
			h.judge(r, rules)
		}
	}()
}

// running is a container the runtime runs when the hook connects.
type running struct {
	id  string
	c   NamedContainer
	ctr *api.Container // as the runtime describes it
	pid int
}

// judge tells of r's grant, or ends r where it escaped the hook. It
// returns false, doing nothing, where r holds an instance made on demand
// that no maker can name yet: then nothing is ended or measured on a
// guess, and SetMaker judges it again.
func (h *Hook) judge(r running, rules Ruleset) bool {
	if rules.Self != "" && r.c.Namespace+"/"+r.c.Pod == rules.Self {
		return true
	}
	r.c.Known = h.pods.Get(r.c.Namespace, r.c.Pod)
	// Its claims' devices are the node's record's, as at its creation:
	// judged without them, a claim's container would look escaped. One
	// the record does not grant it now is ended, as one that escaped
	// is: left running, it would be measured against nothing.
	r.c.Claimed, r.c.ClaimErr = h.claims(context.Background(), r.ctr, r.c.UID)
	if r.c.ClaimErr != nil && h.evict != nil {
		err := h.evict(r.id, r.pid)
		h.log.Warn("container's DRA claim not granted by the node's record at a reconnection: ended, to restart through the hook",
			"pod", r.c.Namespace+"/"+r.c.Pod, "container", r.c.Name, "pid", r.pid, "why", r.c.ClaimErr, "err", err)
		return true
	}
	d, known := h.recorded(Decide(r.c, rules), r.c)
	if !known {
		return false
	}
	if escaped(d, r.ctr, rules) && h.evict != nil {
		err := h.evict(r.id, r.pid)
		h.log.Warn("container runs without the hook's devices (created while the hook was stopped mid-call): ended, to restart through the hook",
			"pod", r.c.Namespace+"/"+r.c.Pod, "container", r.c.Name, "pid", r.pid, "err", err)
		return true
	}
	if d.Action == Grant {
		h.tellGranted(r.id, r.c, d.Assigned)
	}
	return true
}

// resyncWait bounds how long resync waits for the pod informer.
const resyncWait = 5 * time.Minute

// resyncPoll is how often resync looks at the namespaces' list, which
// says nothing when it comes in.
const resyncPoll = 100 * time.Millisecond
