// Package books is the leader's picture of GPU usage, rebuilt only from
// the API: GPU inventories from the vgpud.io/gpus node annotation and
// placements from the vgpud.io/assignment annotation of pods that are not
// terminated. A restarted or new leader therefore rebuilds the same books.
package books

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Ledger maps node names to their GPUs and committed usage.
type Ledger struct {
	names     wellknown.ResourceNames
	scheduler string             // only pods of this scheduler are booked from the API
	clock     clock.PassiveClock // times a deleted pod's in-flight hold
	// deletedInFlight is how long a pod deleted while in flight still
	// holds its node's in-flight slot (KeepDeletedInFlight).
	deletedInFlight time.Duration

	// freed, if set, is told after a booking is dropped or given back
	// (NotifyFreed).
	freed func()

	mu    sync.RWMutex
	nodes map[string]*nodeState
	// nodeGen counts the states added to nodes, which are never removed
	// or replaced: a name resolved under one count resolves the same
	// while it holds (resolved).
	nodeGen uint64
	// resolved is the last names EachNodeFor read, resolved (resolve.go).
	resolved atomic.Pointer[resolved]
	pods     map[types.UID]podState
	tokens   uint64 // the last Book's token
	// unhonoured are the pods whose assignment a newer vgpud wrote in a
	// form this one cannot honour: what they hold is unknown, so nothing
	// more is placed on their node, nor charged to their namespace.
	unhonoured map[types.UID]unhonouredPod
	// charging are the nodes whose GPUs hold memory or instances charged
	// to a namespace (nodeState.charges).
	charging map[string]bool
	// claimNodes are the nodes each DRA claim holds vgpud's devices on
	// (nodeState.claims).
	claimNodes map[types.UID][]string
	// smallest is SmallestGPUMiB plus one, 0 while a node's smallest
	// changed since it was last found (setSmallest): the webhook asks it
	// of every GPU pod created, and walking every GPU of every node for
	// it is work no node's change asked for.
	smallest atomic.Int64
}

type nodeState struct {
	// What a filter reads of every node (Ledger.stateFor) comes first,
	// together in a few cache lines: it walks a thousand nodes per call,
	// from memory the leader's other work has evicted.
	gpus   []protocol.GPU
	invErr error
	// cordonErr: the node's cordon annotation does not parse (its policy
	// unbound), so which GPUs it takes out is unknown and the node takes
	// no new pod.
	cordonErr error
	usable    bool   // the device plugin is registered: allocatable GPUs > 0
	plugin    string // the node role's vgpud.io/plugin: serving or draining
	// unhonoured: the node's pods whose assignments this build cannot
	// honour (Ledger.unhonoured), with why.
	unhonoured map[types.UID]error
	current    fit.Node // gpus with the usage of pods, kept up to date; replaced, never changed in place
	// fullness is fit.Fullness(current), kept with it: a filter ranks
	// every node, and summing each node's GPUs again was a tenth of it.
	fullness int64

	// mig is what the MIG instances among gpus are part of, by instance
	// UUID (protocol.Inventory.Bookable).
	mig map[string]*protocol.MIGRef
	// features the node's vgpud honours in an assignment (its inventory's)
	features []string
	sets     []fit.Set // its connected GPU sets
	// exact: the runtime names each container's pod there (NRI), so its
	// binds need no order and its pods record no phase.
	exact bool
	// cordoned are the UUIDs of the GPUs an operator's cordon names
	// (AnnotationCordon, AnnotationCordonHAMi); cordonErr, when that does
	// not parse.
	cordoned map[string]bool
	// held is, by GPU UUID, what the node last reported its GPUs hold
	// beyond the slices booked on them (Held, from the AnnotationUsage
	// value usageRaw); nil: nothing, as from a node that publishes none
	// or a value that does not decode.
	held     map[string]protocol.GPUHeld
	usageRaw string
	// kept are the instances made for pods that ended which processes
	// keep, by name, with the pod each was made for (keptOf); past, the
	// pods that ended after the books held them here (leftbehind.go);
	// charges, what held and kept charge each namespace (heldCharges).
	kept    map[string]types.UID
	past    map[types.UID]pastPod
	charges map[string]podmodel.Usage
	pods    map[types.UID]bool
	// claims are what DRA claims were allocated of its devices, by
	// claim UID (claims.go).
	claims map[types.UID][]resourceapi.DeviceRequestAllocationResult
	// smallest is the least memory of its shared GPUs (0: none), as
	// SmallestGPUMiB counts them.
	smallest int64
	// inFlight are the node's bound pods kubelet has not allocated yet
	// (usually none or one), kept up to date; changed, when a bind waits
	// on them, is closed at their next recount.
	inFlight []flying
	changed  chan struct{}
	// gone are pods deleted while in flight, by namespace/name, until when
	// they still count as in flight.
	gone map[string]time.Time
}

// unhonouredPod is where a pod the books cannot honour is (Ledger.unhonoured).
type unhonouredPod struct{ node, namespace, name string }

type podState struct {
	node      string
	namespace string
	name      string
	// raw is the assignment annotation as booked (bind passes the value
	// its Binding writes), so the informer's echo of it is recognised.
	raw       string
	placement podmodel.Placement
	// inFlight: bound by the leader, not yet allocated by kubelet. While
	// one pod on a node is in flight no other may be bound there, since
	// Allocate carries only device counts.
	inFlight bool
	// bound: the pod has a node (spec.nodeName, or our own Binding just
	// succeeded). A booked pod without one is a bind in progress.
	bound bool
	// shown: an informer event has carried this booking's assignment;
	// until then it is a bind's own (binds.go).
	shown bool
	// token names the Book that made a booking not shown yet (Release).
	token uint64
	// api, for a booking not shown yet, is what the API last showed of
	// the pod, to go back to if the bind fails; nil: no assignment.
	api *podState
}

// New returns an empty ledger for the given resource names; it books pods
// of scheduler only, and clk times its holds.
func New(names wellknown.ResourceNames, scheduler string, clk clock.PassiveClock) *Ledger {
	return &Ledger{names: names, scheduler: scheduler, clock: clk, nodes: map[string]*nodeState{}, pods: map[types.UID]podState{}, unhonoured: map[types.UID]unhonouredPod{}, charging: map[string]bool{}, claimNodes: map[types.UID][]string{}}
}

// SetPod books or unbooks a pod from its assignment annotation (beneath a
// bind's own booking, if the event predates the bind's Binding: binds.go). It returns
// an error for an assignment it will not book — unreadable, or not one
// vgpud's bind could have written (another scheduler's pod, or a pod bound
// to a node other than the assignment's); the caller should say so loudly.
func (c *Ledger) SetPod(p *slimpod.Pod) error {
	raw, ok := p.Assignment, p.HasAssignment
	if p.Terminated() {
		c.unbook(p.UID, false) // kubelet is done with a terminated pod
		c.rememberEnded(p)
		return nil
	}
	inFlight := inFlightOf(p)
	if !ok && p.HAMiAllocated != "" {
		// A pod HAMi placed: booked as it says, never in flight (vgpud
		// never binds it). Its raw form cannot be an assignment's JSON.
		raw, ok, inFlight = hamiRaw+p.HAMiNode+"\n"+p.HAMiAllocated, true, false
	}
	if ok && (c.unchanged(p, raw, inFlight) || c.reflag(p, raw, inFlight)) {
		return nil
	}
	// Decoded outside the lock (the inventory check takes it); what the
	// books then hold is looked at and changed under one lock, so a bind
	// booking the pod meanwhile is not undone (binds.go).
	var next *podState
	var err error
	if ok {
		var a protocol.Assignment
		if a, err = c.readAssignment(p); err == nil {
			st := c.stateOf(p, a, raw, inFlight)
			st.shown = true
			next = &st
		}
	}
	c.mu.Lock()
	c.setUnhonoured(p, err)
	if c.beneath(p, next) {
		c.mu.Unlock()
		return err
	}
	dropped := false
	if next != nil {
		c.shareUUIDs(next)
		c.put(p.UID, *next)
	} else {
		// An unreadable or untrusted assignment is dropped as if the pod
		// were deleted: if it was in flight, it keeps the slot a while.
		dropped = c.drop(p.UID, err != nil)
	}
	c.mu.Unlock()
	c.tellFreed(dropped)
	return err
}

// inFlightOf says whether the pod as the API shows it waits for kubelet's
// Allocate: its phase annotation still bound, and the pod pending.
func inFlightOf(p *slimpod.Pod) bool {
	phase, err := protocol.ParsePhase(p.AssignmentPhase)
	if err != nil {
		phase = protocol.PhaseBound // unreadable: treat as not yet allocated, the safe side
	}
	return phase == protocol.PhaseBound && p.Phase == corev1.PodPending
}

// readAssignment decodes the pod's assignment and checks it is one
// vgpud's bind could have written.
func (c *Ledger) readAssignment(p *slimpod.Pod) (protocol.Assignment, error) {
	if !p.HasAssignment {
		return c.readHAMi(p)
	}
	a, err := protocol.DecodeAssignment(p.Assignment)
	if err == nil {
		err = c.trusted(p, a)
	}
	if err != nil {
		return protocol.Assignment{}, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return a, nil
}

// trusted is Bookable for p against its node's GPUs as the books know them.
func (c *Ledger) trusted(p *slimpod.Pod, a protocol.Assignment) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var gpus []protocol.GPU
	if st, ok := c.nodes[a.Node]; ok {
		gpus = st.gpus
	}
	return Bookable(c.scheduler, p.SchedulerName, p.NodeName, a, gpus)
}

// stateOf is the booking of a for the pod as p shows it, not shown yet.
// The pod's containers say which are init containers and sidecars
// (podmodel's footprint rule).
func (c *Ledger) stateOf(p *slimpod.Pod, a protocol.Assignment, raw string, inFlight bool) podState {
	return podState{node: a.Node, namespace: p.Namespace, name: p.Name, raw: raw, placement: podmodel.PlacementOf(a, p.Kinds()),
		inFlight: inFlight, bound: p.NodeName != ""}
}

// put books st for the pod, in place of its booking so far. c.mu held.
func (c *Ledger) put(uid types.UID, st podState) {
	old, ok := c.pods[uid]
	if ok && old.node != st.node {
		delete(c.node(old.node).pods, uid)
		c.recompute(old.node)
	}
	if ok && old.node == st.node {
		// A pod's node never goes back to empty: an informer event older
		// than our own Binding must not make a bound pod look unbound.
		st.bound = st.bound || old.bound
	}
	c.pods[uid] = st
	c.node(st.node).pods[uid] = true
	if ok && old.node == st.node && old.raw == st.raw && old.namespace == st.namespace && !strings.HasPrefix(st.raw, hamiRaw) {
		// The same assignment again (a bind books its pod twice): what
		// the node's GPUs hold and charge is as it was; only whether the
		// pod is in flight may have changed. (HAMi's record is read
		// against the node's GPUs as they are: not the same booking.)
		c.refreshInFlight(st.node)
		return
	}
	c.recompute(st.node)
}

// shareUUIDs makes each slice in st's placement name its GPU by the
// node's own UUID string, so that a booking keeps no copy of it decoded
// from the pod's assignment: tens of thousands of pods, a 40-byte UUID
// each. For a new state only, c.mu held: the slices are copied first,
// since the assignment they came from is its caller's.
func (c *Ledger) shareUUIDs(st *podState) {
	n, ok := c.nodes[st.node]
	if !ok {
		return
	}
	pl := st.placement
	for i := range pl {
		if len(pl[i].GPUs) == 0 {
			continue
		}
		pl[i].GPUs = slices.Clone(pl[i].GPUs)
		for j := range pl[i].GPUs {
			pl[i].GPUs[j].UUID = sameUUID(n.gpus, pl[i].GPUs[j].UUID)
		}
	}
}

// NotifyFreed has f called, outside the books' lock, after each booking
// they drop: GPUs may have freed. Call before use.
func (c *Ledger) NotifyFreed(f func()) { c.freed = f }

// tellFreed tells freed, if set, when a booking was dropped or given
// back. Call without c.mu.
func (c *Ledger) tellFreed(dropped bool) {
	if dropped && c.freed != nil {
		c.freed()
	}
}

// DeletePod unbooks a pod that is gone.
func (c *Ledger) DeletePod(uid types.UID) { c.unbook(uid, true) }

func (c *Ledger) unbook(uid types.UID, deleted bool) {
	c.mu.Lock()
	c.setUnhonoured(&slimpod.Pod{Meta: slimpod.Meta{UID: uid}}, nil)
	dropped := c.drop(uid, deleted)
	c.mu.Unlock()
	c.tellFreed(dropped)
}

// setUnhonoured records whether p's assignment, read with err, is one a
// newer vgpud wrote that this one cannot honour. c.mu held.
func (c *Ledger) setUnhonoured(p *slimpod.Pod, err error) {
	if u, ok := c.unhonoured[p.UID]; ok {
		delete(c.unhonoured, p.UID)
		delete(c.node(u.node).unhonoured, p.UID)
	}
	if errors.Is(err, protocol.ErrUnsupported) && p.NodeName != "" {
		c.unhonoured[p.UID] = unhonouredPod{node: p.NodeName, namespace: p.Namespace, name: p.Name}
		st := c.node(p.NodeName)
		if st.unhonoured == nil {
			st.unhonoured = map[types.UID]error{}
		}
		st.unhonoured[p.UID] = err
	}
}

// drop drops the booking and reports whether there was one. c.mu held.
func (c *Ledger) drop(uid types.UID, deleted bool) bool {
	old, ok := c.pods[uid]
	if !ok {
		return false
	}
	delete(c.pods, uid)
	st := c.node(old.node)
	delete(st.pods, uid)
	if old.bound {
		c.remember(old.node, uid, old.namespace, old.placement)
	}
	if deleted && old.inFlight && old.bound && old.placement.HoldsGPU() && c.deletedInFlight > 0 {
		now := c.clock.Now()
		for name, until := range st.gone {
			if !now.Before(until) {
				delete(st.gone, name)
			}
		}
		st.gone[old.namespace+"/"+old.name+" (deleted)"] = now.Add(c.deletedInFlight)
	}
	c.recompute(old.node)
	return true
}
