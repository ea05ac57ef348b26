package books

import (
	"fmt"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// The books as their readers see them: the extender's filter and bind,
// the quota check and the metrics.

// Node returns a copy of a usable node's GPUs and usage, or why it is not usable.
func (c *Ledger) Node(name string) (fit.Node, *fit.Reason) { return c.NodeFor(name, "") }

// NodeFor is Node as pod sees it: without pod's own booking, so a pod is
// not in its own way when its bind fits it again after reserving room
// (binds.go).
func (c *Ledger) NodeFor(name string, pod types.UID) (fit.Node, *fit.Reason) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, _, reason := c.nodeFor(name, pod, c.ownNode(pod))
	return n, reason
}

// EachNodeFor is NodeFor of each of names in turn, with fit.Fullness of
// each node that answers, a read lock and a
// look at pod's own booking for each run of eachNodeRun names: a filter
// asks it of every node, and a lock and a lookup each were a tenth of the
// call, while a body of a million names must not hold the books from
// their writers. f sees each node's answer and returns false to stop; it
// must call nothing that takes the books' lock (the Ledger, or a
// BindQueue that asks it), which a waiting writer would deadlock.
func (c *Ledger) EachNodeFor(names []string, pod types.UID, f func(i int, n fit.Node, fullness int64, reason *fit.Reason) bool) {
	w := nodeWalk{last: c.resolved.Load(), keep: len(names) <= maxResolved}
	for start := 0; start < len(names); start += eachNodeRun {
		if !c.eachNodeRun(&w, names, start, min(start+eachNodeRun, len(names)), pod, f) {
			return
		}
	}
	if w.fresh != nil {
		c.resolved.Store(w.fresh)
	}
}

// eachNodeRun is how many nodes EachNodeFor reads under one lock.
const eachNodeRun = 256

// nodeWalk is one EachNodeFor's names resolution: last, the one kept
// from an earlier call; fresh, this call's own, while last did not hold
// and every run read the books under one nodeGen; keep, whether names
// are few enough to keep.
type nodeWalk struct {
	last, fresh *resolved
	keep        bool
}

func (c *Ledger) eachNodeRun(w *nodeWalk, names []string, start, end int, pod types.UID, f func(int, fit.Node, int64, *fit.Reason) bool) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	own := c.ownNode(pod)
	// last either holds for every run or, once nodeGen moved, for none
	// after: a count that moved never comes back.
	states := c.statesFor(w.last, names)
	if states == nil && w.keep {
		switch {
		case start == 0:
			w.fresh = &resolved{names: names, states: make([]*nodeState, len(names)), gen: c.nodeGen}
		case w.fresh != nil && w.fresh.gen != c.nodeGen:
			w.fresh, w.keep = nil, false // a node came meanwhile: resolve afresh next call
		}
	}
	for i := start; i < end; i++ {
		var st *nodeState
		if states != nil {
			st = states[i]
		} else {
			st = c.nodes[names[i]]
			if w.fresh != nil {
				w.fresh.states[i] = st
			}
		}
		n, fullness, reason := c.stateFor(names[i], st, pod, own)
		if !f(i, n, fullness, reason) {
			w.fresh = nil // not all resolved
			return false
		}
	}
	return true
}

// ownNode is the node pod is booked on, "" for none. c.mu held.
func (c *Ledger) ownNode(pod types.UID) string {
	if pod == "" {
		return ""
	}
	return c.pods[pod].node
}

// nodeFor is NodeFor with pod's own node, own, looked up, and the
// node's fit.Fullness as pod sees it (0 with a reason). c.mu held.
func (c *Ledger) nodeFor(name string, pod types.UID, own string) (fit.Node, int64, *fit.Reason) {
	return c.stateFor(name, c.nodes[name], pod, own)
}

// stateFor is nodeFor of st, name's state (nil: not in the books).
func (c *Ledger) stateFor(name string, st *nodeState, pod types.UID, own string) (fit.Node, int64, *fit.Reason) {
	switch {
	case st == nil || (len(st.gpus) == 0 && st.invErr == nil):
		return fit.Node{}, 0, &fit.Reason{Kind: "no vgpud inventory", Text: "node has no " + wellknown.AnnotationGPUs + " annotation; is vgpud running there?"}
	case st.invErr != nil:
		return fit.Node{}, 0, &fit.Reason{Kind: "bad vgpud inventory", Text: st.invErr.Error()}
	case st.cordonErr != nil:
		return fit.Node{}, 0, &fit.Reason{Kind: "unreadable gpu cordon", Text: st.cordonErr.Error()}
	case len(st.unhonoured) > 0:
		return fit.Node{}, 0, &fit.Reason{Kind: "assignment from a newer vgpud", Text: firstUnhonoured(st.unhonoured)}
	case st.plugin == wellknown.PluginClaims:
		return fit.Node{}, 0, &fit.Reason{Kind: "serves DRA claims", Text: "the node serves its GPUs to DRA claims (dra: true), not to vGPU resources: ask a claim to use it (docs/dra.md)"}
	case !st.usable:
		// kube-scheduler saw GPUs here (it filters on allocatable first),
		// so the books lag a plugin that is coming back.
		return fit.Node{}, 0, &fit.Reason{Kind: "device plugin not registered", Text: "allocatable " + c.names.GPU + " is 0; the device plugin is not registered with kubelet", Passing: true}
	case st.plugin != wellknown.PluginServing:
		// A pod bound now would meet a plugin that is going away (or not
		// back yet), or a restarting kubelet, and fail kubelet's admission.
		return fit.Node{}, 0, &fit.Reason{Kind: "device plugin not serving", Text: fmt.Sprintf("node's %s is %q, not %q: vgpud there is stopping or starting, or kubelet is restarting", wellknown.AnnotationPlugin, st.plugin, wellknown.PluginServing), Passing: true}
	}
	if own != "" && own == name {
		n := c.usage(name, pod)
		return n, fit.Fullness(n), nil // without pod: not what the books keep
	}
	// Shared, not copied: recompute replaces current and never changes it
	// in place, and callers only read a Node (core does not write one).
	return st.current, st.fullness, nil
}

// NodeNames are the nodes the books know, in no order.
func (c *Ledger) NodeNames() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.nodes))
	for name := range c.nodes {
		out = append(out, name)
	}
	return out
}

// Residents is node name's GPUs with nothing booked, as fit sees them,
// and the pods booked there (bound or binding, vgpud's and HAMi's), keyed
// by UID, their priority left to the caller; a reason where nothing
// could be placed there at all (NodeFor's).
func (c *Ledger) Residents(name string) (fit.Node, []fit.Resident, *fit.Reason) {
	if _, r := c.NodeFor(name, ""); r != nil {
		return fit.Node{}, nil, r
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	st, ok := c.nodes[name]
	if !ok {
		return fit.Node{}, nil, &fit.Reason{Kind: "no vgpud inventory", Text: "node is gone from the books"}
	}
	out := make([]fit.Resident, 0, len(st.pods))
	for uid := range st.pods {
		p := c.pods[uid]
		out = append(out, fit.Resident{Key: string(uid), Namespace: p.namespace, Name: p.name, Placement: p.placement})
	}
	return c.bare(name, st), out, nil
}

// NamespaceUsage is what the booked pods of namespace are charged,
// summed over their GPUs (podmodel.Placement.Charge), leaving out the pod
// except: the figure bind checks quota against. It is an error while a
// pod of namespace holds what a newer vgpud assigned in a form this one
// cannot honour: its charge is unknown.
func (c *Ledger) NamespaceUsage(namespace string, except types.UID) (podmodel.Usage, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for uid, u := range c.unhonoured {
		if u.namespace == namespace && uid != except {
			return podmodel.Usage{}, fmt.Errorf("pod %s/%s holds GPUs on node %s under an assignment a newer vgpud wrote, which this leader cannot read, so the namespace's quota cannot be checked; upgrade this replica", u.namespace, u.name, u.node)
		}
	}
	var total podmodel.Usage
	for uid, p := range c.pods {
		if p.namespace != namespace || uid == except {
			continue
		}
		c.addCharge(&total, p)
	}
	for node := range c.charging {
		total = total.Plus(c.nodes[node].charges[namespace])
	}
	return total, nil
}

// addCharge adds what p is charged to total; c.mu held.
func (c *Ledger) addCharge(total *podmodel.Usage, p podState) {
	u := p.placement.Charge(c.gpuOf(p.node))
	total.MemMiB += u.MemMiB
	total.Cores += u.Cores
	total.Slots += u.Slots
}

// gpuOf finds each GPU of node in its inventory, for a charge; c.mu
// held.
func (c *Ledger) gpuOf(node string) func(uuid string) (protocol.GPU, bool) {
	var gpus []protocol.GPU
	if st := c.nodes[node]; st != nil {
		gpus = st.gpus
	}
	return func(uuid string) (protocol.GPU, bool) {
		i := slices.IndexFunc(gpus, func(g protocol.GPU) bool { return g.UUID == uuid })
		if i < 0 {
			return protocol.GPU{}, false
		}
		return gpus[i], true
	}
}

// PodCount is how many pods the books hold.
func (c *Ledger) PodCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.pods)
}

// Pods lists the booked pods as namespace/name, sorted, for debugging and tests.
func (c *Ledger) Pods() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.pods))
	for _, p := range c.pods {
		out = append(out, p.namespace+"/"+p.name+"@"+p.node)
	}
	sort.Strings(out)
	return out
}

// SmallestGPUMiB is the least memory of any shared GPU the books know, 0
// if they know none: the least a GPU held whole can be charged. MIG
// instances are left out: a pod that asks a whole GPU is never given one
// smaller than the whole GPU.
func (c *Ledger) SmallestGPUMiB() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if s := c.smallest.Load(); s > 0 {
		return s - 1
	}
	var least int64
	for _, st := range c.nodes {
		if least == 0 || (st.smallest > 0 && st.smallest < least) {
			least = st.smallest
		}
	}
	// Under the read lock: setSmallest, which forgets it, takes the
	// write lock, so what is stored here is never older than a change.
	c.smallest.Store(least + 1)
	return least
}

// setSmallest finds the node's smallest shared GPU again after its GPUs
// changed, and forgets the books' if the node's is another. c.mu held
// for writing.
func (c *Ledger) setSmallest(st *nodeState) {
	var least int64
	for _, g := range st.gpus {
		if st.mig[g.UUID] != nil {
			continue
		}
		if least == 0 || (g.MemoryMiB > 0 && g.MemoryMiB < least) {
			least = g.MemoryMiB
		}
	}
	if least != st.smallest {
		st.smallest = least
		c.smallest.Store(0)
	}
}

// firstUnhonoured is one of a node's unhonoured assignments' errors,
// the same one each time.
func firstUnhonoured(m map[types.UID]error) string {
	uids := make([]types.UID, 0, len(m))
	for uid := range m {
		uids = append(uids, uid)
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	return fmt.Sprintf("what %d pod(s) hold here is unknown to this leader: %v", len(m), m[uids[0]])
}
