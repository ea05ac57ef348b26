package nrihook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/grant"
	"github.com/vgpud/vgpud/protocol/containerenv"
)

// PodIndex is the node's pod informer.
type PodIndex interface {
	Get(namespace, name string) *corev1.Pod
	// HasSynced reports whether the first list is in.
	HasSynced() bool
	// Changed returns a channel closed at the next change.
	Changed() <-chan struct{}
}

// HookObserver is told how long each container's decision took, and its
// verdict (the node's metrics).
type HookObserver interface {
	RuntimeHook(verdict string, took time.Duration)
}

// Hook answers the runtime's NRI calls.
type Hook struct {
	rules Ruleset
	pods  PodIndex
	// wait bounds how long a call waits for the informer to show a pod
	// the runtime names and it does not have yet; NRI's own limit for a
	// whole call is 2 s by default.
	wait  time.Duration
	obs   HookObserver
	clock clock.Clock
	log   *slog.Logger

	// granted is told of each grant and removed pod; nil tells nobody.
	granted Granted
	// evict ends a container found running without the hook's devices
	// (EvictWith); nil ends none.
	evict func(id string, pid int) error

	mu sync.Mutex
	// slice is rules.Slice as Settle last set it; unsettled says why no
	// slice is granted yet (Hold), "" once the node's settings are read.
	slice     grant.Shape
	unsettled string
	maker     InstanceMaker // nil: the node makes no MIG instances (yet)
	pending   []running     // found running on made instances before the maker came
	seen      map[types.UID]*Record
	// sandboxes is each pod's sandbox its newest container was created
	// in: the stop or removal of an older one (kubelet made the pod a
	// new sandbox, then collects the old) forgets none of its grants.
	sandboxes map[types.UID]string
	conns     int // connections to the runtime made so far
	up        bool
	closing   bool          // the hook is stopping: it refuses every call
	inflight  int           // calls being answered
	drained   chan struct{} // closed once closing with no call in flight
}

// Record is what the hook did to one pod's containers, for inspect.
type Record struct {
	Granted map[string]string // container → NVIDIA_VISIBLE_DEVICES
	Refused map[string]string // container → why
}

// callMargin is what the hook leaves of the runtime's deadline for a
// call, for the decision and the answer.
const callMargin = 700 * time.Millisecond

// Hold makes the hook refuse every slice, saying why (the node is still
// reading its settings), until Settle; exempt and GPU-less containers
// are answered as ever. Call before Run.
func (h *Hook) Hold(why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unsettled = why
}

// Settle sets the options of the slices the hook grants and ends Hold.
func (h *Hook) Settle(slice grant.Shape) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.slice, h.unsettled = slice, ""
}

// New returns a hook deciding by r from pods; clk times its waits.
func New(r Ruleset, pods PodIndex, wait time.Duration, obs HookObserver, clk clock.Clock, log *slog.Logger) *Hook {
	return &Hook{rules: r, slice: r.Slice, pods: pods, wait: wait, obs: obs, clock: clk, log: log, seen: map[types.UID]*Record{}, sandboxes: map[types.UID]string{}, drained: make(chan struct{})}
}

// CreateContainer is NRI's call as the runtime creates a container, after
// the image's and the pod's settings are in its spec.
func (h *Hook) CreateContainer(ctx context.Context, sb *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	start := h.clock.Now()
	c := NamedContainer{Namespace: sb.GetNamespace(), Pod: sb.GetName(), UID: sb.GetUid(), Name: ctr.GetName(), Static: static(sb)}
	if !h.enter() {
		// The runtime would create the container unadjusted if the
		// connection closed during this call: refuse while stopping.
		return nil, nil, fmt.Errorf("vgpud on node %s is stopping; kubelet retries the container once vgpud is back", h.rules.Node)
	}
	defer h.leave()
	c.Known = h.lookup(ctx, c)
	c.Claimed, c.ClaimErr = h.claims(ctx, ctr, c.UID)
	rules, unsettled := h.rules, ""
	h.mu.Lock()
	h.sandboxes[types.UID(c.UID)] = sb.GetId()
	rules.Slice, unsettled = h.slice, h.unsettled
	h.mu.Unlock()
	d := Decide(c, rules)
	if d.Action == Grant && unsettled != "" {
		d = Decision{Action: Refuse, Reason: fmt.Sprintf("vgpud on node %s %s, so it cannot grant container %q its slice yet; kubelet retries the container", rules.Node, unsettled, c.Name)}
	}
	d = h.resolveMade(ctx, d, c)
	adj, err := h.apply(d, ctr)
	verdict := d.Action.String()
	if err != nil {
		verdict = Refuse.String()
	}
	h.obs.RuntimeHook(verdict, h.clock.Since(start))
	h.remember(c, d, err)
	if err != nil {
		h.log.Warn("container refused", "pod", c.Namespace+"/"+c.Pod, "container", c.Name, "err", err)
		return nil, nil, err
	}
	if d.Action == Grant {
		h.tellGranted(ctr.GetId(), c, d.Assigned)
		h.log.Info("container granted its slice", "pod", c.Namespace+"/"+c.Pod, "container", c.Name, "gpus", d.Slice.Env[containerenv.EnvVisibleDevices], "took", h.clock.Since(start))
	}
	return adj, nil, nil
}

// claims resolves the DRA claims' CDI devices kubelet gave ctr, a
// container of the pod with that UID (Ruleset.Claims).
func (h *Hook) claims(ctx context.Context, ctr *api.Container, podUID string) ([]ClaimGrant, error) {
	var out []ClaimGrant
	for _, d := range ctr.GetCDIDevices() {
		if h.rules.Claims == nil {
			return nil, nil // any claim's device is then foreign (apply)
		}
		rctx, cancel := context.WithTimeout(ctx, h.callWait(ctx))
		g, ours, err := h.rules.Claims(rctx, d.GetName(), podUID, ctr.GetName())
		cancel()
		if err != nil {
			return nil, err
		}
		if ours {
			out = append(out, g)
		}
	}
	return out, nil
}

// lookup is the informer's pod of the runtime's name and UID, waiting a
// little when it does not show it yet: kubelet may see a pod a moment
// before this replica's watch does.
func (h *Hook) lookup(ctx context.Context, c NamedContainer) *corev1.Pod {
	deadline := h.clock.NewTimer(h.callWait(ctx))
	defer deadline.Stop()
	for {
		changed := h.pods.Changed()
		p := h.pods.Get(c.Namespace, c.Pod)
		// Before the first list, a wait would only hold every other
		// container start on the node (NRI answers one call at a time).
		if p != nil && samePod(p, c.UID, c.Static) || c.Static || !h.pods.HasSynced() {
			return p
		}
		select {
		case <-changed:
		case <-deadline.C():
			return p
		case <-ctx.Done():
			return p
		}
	}
}

// callWait is how long a call may wait for what it needs: the hook's
// wait, well inside the call's deadline, since the runtime drops a
// plugin that overruns its call and creates the container unadjusted.
// (A context's deadline is on the wall clock, whatever clock times the
// wait.)
func (h *Hook) callWait(ctx context.Context) time.Duration {
	wait := h.wait
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)-callMargin)
	}
	return max(wait, 0)
}

// apply turns d into the runtime's adjustment of ctr.
//
// NRI sets a variable by replacing its first occurrence in the
// container's env and cannot remove one the pod or image set: a name
// that occurs twice (kubelet's device env and the pod's own) keeps the
// pod's value, and a name the slice does not set keeps whatever was
// written. So a container whose env would still decide any of the
// slice's names is refused, saying which to remove, never created with
// a slice wider than granted.
func (h *Hook) apply(d Decision, ctr *api.Container) (*api.ContainerAdjustment, error) {
	switch d.Action {
	case Exempt:
		return nil, nil
	case Refuse:
		return nil, errors.New(d.Reason)
	case Keep:
		if found := beyondHAMi(ctr, d.Devices, h.rules.MIGParent); len(found) > 0 {
			return nil, fmt.Errorf("container %q of a pod HAMi placed reaches GPUs beyond HAMi's record of the pod (%s), through %s: remove them; its GPUs are the ones HAMi's device plugin gave it",
				ctr.GetName(), strings.Join(d.Devices, ","), strings.Join(found, ", "))
		}
		return nil, nil
	}
	granted, err := cdiFor(d, h.rules)
	if err != nil {
		return nil, fmt.Errorf("vgpud on node %s cannot hand container %q its GPUs as CDI devices: %w; kubelet retries the container", h.rules.Node, ctr.GetName(), err)
	}
	if found := foreignGPUs(ctr, granted); len(found) > 0 {
		return nil, fmt.Errorf("container %q reaches GPUs vgpud did not grant it, through %s: remove them; a container's GPUs come from the vGPU resources it asks for, which vgpud books", ctr.GetName(), strings.Join(found, ", "))
	}
	want := d.Slice.Env
	if d.Action == Void {
		want = map[string]string{containerenv.EnvVisibleDevices: grant.Void}
	}
	if bad := overriding(ctr.GetEnv(), want, d.Action == Grant); len(bad) > 0 {
		return nil, fmt.Errorf("container %q sets %s in its own env (pod spec, envFrom or image); vgpud decides these from the pod's GPU assignment: remove them", ctr.GetName(), strings.Join(bad, ", "))
	}
	adj := &api.ContainerAdjustment{}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		adj.AddEnv(k, want[k])
	}
	// The runtime injects them after the hook; one the container already
	// asked for is injected once.
	for _, n := range granted.names {
		adj.AddCDIDevice(&api.CDIDevice{Name: n})
	}
	for _, m := range ctr.GetMounts() {
		if grant.DeviceListMount(m.GetDestination()) {
			return nil, fmt.Errorf("container %q mounts %s, where the NVIDIA container runtime reads which GPUs to expose; vgpud decides that from the pod's GPU assignment: remove the mount", ctr.GetName(), m.GetDestination())
		}
	}
	if d.Slice.Cache != "" {
		// Private to the container, bounded, and gone with it: nothing
		// of it lands on the node's disk.
		adj.AddMount(&api.Mount{Source: "tmpfs", Destination: d.Slice.Cache, Type: "tmpfs",
			Options: []string{"nosuid", "nodev", "noexec", "mode=1777", "size=" + grant.CacheSize}})
	}
	for _, m := range d.Slice.Mounts {
		opts := []string{"rbind", "rprivate"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		adj.AddMount(&api.Mount{Source: m.Host, Destination: m.Container, Type: "bind", Options: opts})
	}
	return adj, nil
}

// overriding lists the names in env that setting want cannot override.
// NRI replaces a name's first occurrence and keeps the later ones, whose
// last value wins: a name of want set more than once is lost unless its
// last value is want's (a pod admitted before NRI carries kubelet's
// replayed device env, the very grant). In a granted container a name
// the slice owns but does not set stays as written, so it must not be
// there, except a per-GPU limit for an index past the container's GPUs,
// which names no device it sees, and a value a pod may choose (a core
// policy the webhook injected).
func overriding(env []string, want map[string]string, granted bool) []string {
	count, last := map[string]int{}, map[string]string{}
	owned := map[string]bool{} // some value of it is not the pod's to set
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		count[name]++
		last[name] = value
		owned[name] = owned[name] || grant.Owned(name, value)
	}
	gpus := strings.Count(want[containerenv.EnvVisibleDevices], ",") + 1
	var bad []string
	for name, n := range count {
		w, set := want[name]
		switch {
		case set && n > 1 && last[name] != w:
			bad = append(bad, name)
		case !set && granted && owned[name]:
			if _, i, perGPU := containerenv.PerGPUEnv(name); perGPU && i >= gpus {
				continue
			}
			bad = append(bad, name)
		}
	}
	slices.Sort(bad)
	return bad
}

// remember keeps what the hook did, for inspect and the node's phase.
func (h *Hook) remember(c NamedContainer, d Decision, err error) {
	if d.Action != Grant && err == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.seen[types.UID(c.UID)]
	if r == nil {
		r = &Record{Granted: map[string]string{}, Refused: map[string]string{}}
		h.seen[types.UID(c.UID)] = r
	}
	if err != nil {
		r.Refused[c.Name] = err.Error()
		return
	}
	delete(r.Refused, c.Name)
	r.Granted[c.Name] = d.Slice.Env[containerenv.EnvVisibleDevices]
}

// Synchronize is the runtime's list of what already runs, sent at each
// connection; running containers keep what they were created with.
func (h *Hook) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	h.mu.Lock()
	h.conns++
	h.up = true
	live := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		live[types.UID(p.GetUid())] = true
	}
	for uid := range h.seen {
		if !live[uid] {
			delete(h.seen, uid)
		}
	}
	for uid := range h.sandboxes {
		if !live[uid] {
			delete(h.sandboxes, uid)
		}
	}
	// Each running container's sandbox is its pod's newest.
	uidOf := make(map[string]types.UID, len(pods))
	for _, p := range pods {
		uidOf[p.GetId()] = types.UID(p.GetUid())
	}
	for _, c := range ctrs {
		if uid, ok := uidOf[c.GetPodSandboxId()]; ok {
			h.sandboxes[uid] = c.GetPodSandboxId()
		}
	}
	h.mu.Unlock()
	h.log.Info("connected to the container runtime", "pods", len(pods), "containers", len(ctrs))
	if h.stopping() {
		// What resync reads (the pod index) may be stopped by now;
		// the next replica resyncs.
		return nil, nil
	}
	h.resync(pods, ctrs)
	return nil, nil
}

// Records is what the hook did, by pod UID; the caller may keep it.
func (h *Hook) Records() map[types.UID]Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[types.UID]Record, len(h.seen))
	for uid, r := range h.seen {
		out[uid] = Record{Granted: maps.Clone(r.Granted), Refused: maps.Clone(r.Refused)}
	}
	return out
}
