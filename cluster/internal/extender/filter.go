package extender

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Nodes is the cache as the placer needs it.
type Nodes interface {
	// NodeFor is a node's GPUs and usage as pod sees them: without its
	// own earlier booking.
	NodeFor(name string, pod types.UID) (fit.Node, *fit.Reason)
	// EachNodeFor is NodeFor of each of names in turn, with the
	// fit.Fullness of each node that answers, to f, which
	// returns false to stop and calls nothing of Nodes or BindQueue
	// (the books' lock may be held).
	EachNodeFor(names []string, pod types.UID, f func(i int, n fit.Node, fullness int64, reason *fit.Reason) bool)
}

// BindQueue says how many binds to a node are under way (Binder.Queued).
type BindQueue interface {
	Queued(node string) int
}

// maxQueued is how many binds may wait on one node before prioritize
// prefers nodes that can take a pod now. Where a node guesses which pod
// kubelet admits it takes one bound pod at a time; binpack alone would
// queue a whole burst behind one node's Allocates.
const maxQueued = 2

// PodLookup finds a pod in the leader's informer; nil if it has none.
// The placer puts its Events on the pod it finds, and reads the pod from
// it instead of decoding the request's copy (Placer.Pod).
type PodLookup func(namespace, name string) *slimpod.Pod

// Placer answers filter and prioritize from the books; http.go carries
// them over HTTP.
type Placer struct {
	nodes     Nodes
	residents Residents // nil: preemption is not weighed
	// nominated are the nodes held for pods that preempted there
	// (Nominate); nominateMu orders writers.
	nominated  atomic.Pointer[nominations]
	nominateMu sync.Mutex
	// refusals are the candidate nodes of pods Filter refused lately.
	refusals   map[types.UID][]string
	refusalsMu sync.Mutex
	queue      BindQueue
	names      wellknown.ResourceNames
	policy     *Policy
	lookup     PodLookup
	events     func(pod *corev1.Pod, reason, message string)
	refused    func(pod *slimpod.Pod)
	// preemptAsked is told of each pod Preempt weighs.
	preemptAsked func(pod types.UID)
	podRead      func(fromInformer bool)
	filtered     func(outcome string, reasons map[string]fit.Reason)
	log          *slog.Logger
}

// NotifyRefused has f told of every pod the leader knows that Filter
// found no node for; call before serving.
func (p *Placer) NotifyRefused(f func(pod *slimpod.Pod)) { p.refused = f }

// NotifyPreemptAsked has f told of every pod kube-scheduler asked the
// preempt verb for; call before serving.
func (p *Placer) NotifyPreemptAsked(f func(pod types.UID)) { p.preemptAsked = f }

// Filter outcomes, as NotifyFiltered tells them.
const (
	FilterFits          = "fits"
	FilterUnschedulable = "unschedulable"
	FilterInvalid       = "invalid"
)

// NotifyFiltered has f told of every Filter answered: its outcome, and
// why each node that does not fit the pod does not; call before serving.
func (p *Placer) NotifyFiltered(f func(outcome string, reasons map[string]fit.Reason)) {
	p.filtered = f
}

// tellFiltered tells NotifyFiltered's f, if any.
func (p *Placer) tellFiltered(outcome string, reasons map[string]fit.Reason) {
	if p.filtered != nil {
		p.filtered(outcome, reasons)
	}
}

// NotifyPodRead has f told where each pod filter and prioritize read came
// from (metrics); call before serving.
func (p *Placer) NotifyPodRead(f func(fromInformer bool)) { p.podRead = f }

// NewPlacer returns a Placer. Events are recorded only on pods lookup
// finds. lookup may be nil (every request's pod decoded, no Events),
// events too (no Events), queue too (no binds counted).
func NewPlacer(nodes Nodes, queue BindQueue, names wellknown.ResourceNames, policy *Policy, lookup PodLookup, events func(pod *corev1.Pod, reason, message string), log *slog.Logger) *Placer {
	if events == nil {
		events = func(*corev1.Pod, string, string) {}
	}
	if lookup == nil {
		lookup = func(string, string) *slimpod.Pod { return nil }
	}
	if queue == nil {
		queue = &bindQueue{}
	}
	r, _ := nodes.(Residents)
	return &Placer{nodes: nodes, residents: r, queue: queue, names: names, policy: policy, lookup: lookup, events: events, log: log}
}

// Filter returns the nodes, of names, that pod fits and its node policy
// ranks first, and why it fits none of the others; when it fits none, it
// records one Event summarising the reasons. An error means the pod
// itself cannot be read, so it fits nowhere.
//
// Returning only the best nodes puts the node policy into kube-scheduler's
// one extender call per pod: its configuration then needs no
// prioritizeVerb, which would cost a second round trip over every
// candidate name, and kube-scheduler's own scores choose among equals.
//
// It stops when ctx ends: kube-scheduler gave up on the call, and nobody
// reads the answer.
func (p *Placer) Filter(ctx context.Context, pod *slimpod.Pod, names []string) ([]string, extenderv1.FailedNodesMap, error) {
	d := p.policy.Get()
	req, nodePolicy, err := requestFor(pod, d)
	if err != nil {
		p.tellFiltered(FilterInvalid, nil)
		return nil, nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	fits, fullness := sc.fits[:0], sc.fullness[:0]
	defer func() { sc.fits, sc.fullness = fits[:0], fullness[:0] }()
	failed := extenderv1.FailedNodesMap{}
	reasons := map[string]fit.Reason{}
	held := p.nominated.Load()
	var stopped error
	p.nodes.EachNodeFor(names, pod.UID, func(i int, n fit.Node, full int64, reason *fit.Reason) bool {
		if stopped = given(ctx, i); stopped != nil {
			return false
		}
		name := names[i]
		if reason == nil {
			reason = reservation(held, name, pod)
		}
		if reason == nil {
			reason = fit.Fits(n, req, d.Options)
		}
		if reason != nil {
			failed[name] = reason.Text
			reasons[name] = *reason
			return true
		}
		fits = append(fits, name)
		fullness = append(fullness, full)
		return true
	})
	if stopped != nil {
		return nil, nil, stopped
	}
	if len(fits) == 0 {
		// The Event goes on the pod the leader knows by that name and UID,
		// never on whatever object the request body carries.
		if known := p.lookup(pod.Namespace, pod.Name); known != nil && known.UID == pod.UID && len(reasons) > 0 {
			p.events(known.Ref(), "FilteredNodes", fit.Summarize(len(names), 0, reasons))
			if p.refused != nil {
				p.remember(known.UID, names)
				p.refused(known)
			}
		}
		p.tellFiltered(FilterUnschedulable, reasons)
		if err := passing(reasons); err != nil {
			return nil, nil, err
		}
		return []string{}, failed, nil
	}
	p.tellFiltered(FilterFits, reasons)
	scores := p.rank(fits, fullness, nodePolicy, sc)
	// A copy, not fits: the scratch goes back to the pool.
	best := make([]string, 0, countScore(scores, fit.MaxScore))
	for i, score := range scores {
		if score == fit.MaxScore {
			best = append(best, fits[i])
		}
	}
	return best, failed, nil
}

// rank scores nodes 0..10 by policy from their fullness (fit.Rank). A
// node with maxQueued binds already under way scores below every node
// without (unless none is without), so a burst flows to the next nodes by
// the policy instead of waiting for one node's Allocates one by one; pods
// created one after another still pack.
func (p *Placer) rank(nodes []string, fullness []int64, policy string, sc *scratch) []int64 {
	free, busy := sc.free[:0], sc.busy[:0]
	for i, name := range nodes {
		if p.queue.Queued(name) >= maxQueued {
			busy = append(busy, i)
		} else {
			free = append(free, i)
		}
	}
	sc.free, sc.busy = free, busy
	if len(free) == 0 {
		free, busy = busy, nil
	}
	full := sc.full[:0]
	for _, i := range free {
		full = append(full, fullness[i])
	}
	sc.full = full
	sc.ranked = fit.RankInto(sc.ranked, full, policy)
	scores := slices.Grow(sc.scores[:0], len(nodes))[:len(nodes)]
	clear(scores)
	sc.scores = scores
	for k, score := range sc.ranked {
		if len(busy) > 0 {
			score = 1 + score*(fit.MaxScore-1)/fit.MaxScore // above the busy nodes' 0
		}
		scores[free[k]] = score
	}
	return scores
}

func countScore(scores []int64, score int64) int {
	n := 0
	for _, s := range scores {
		if s == score {
			n++
		}
	}
	return n
}

// scratch holds a filter's per-node buffers for the next call: with 1000
// candidate nodes they were most of what a call allocated, and the
// garbage set the pace of the leader's GC.
type scratch struct {
	fits                           []string
	fullness, full, ranked, scores []int64
	free, busy                     []int
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// passing is an error when some node was refused only for a while (vgpud
// restarting there). A pod every node refuses waits in kube-scheduler's
// unschedulable queue until an event it watches; the node's plugin
// annotation turning back to serving is none, so the pod would wait
// minutes. An error sends it to the backoff queue: retried within seconds.
func passing(reasons map[string]fit.Reason) error {
	var nodes []string
	for name, r := range reasons {
		if r.Passing {
			nodes = append(nodes, name)
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	slices.Sort(nodes)
	if len(nodes) > 3 {
		nodes = append(nodes[:3], fmt.Sprintf("and %d more", len(nodes)-3))
	}
	return fmt.Errorf("no node fits now; vgpud is restarting on %s: retrying", strings.Join(nodes, ", "))
}

// Prioritize scores each of names 0..10 as Filter ranks them; a node the
// pod does not fit scores 0. vgpud's own scheduler profile does not call
// it (Filter returns the best nodes only); a profile that does gets the
// same order.
func (p *Placer) Prioritize(ctx context.Context, pod *slimpod.Pod, names []string) (extenderv1.HostPriorityList, error) {
	d := p.policy.Get()
	req, nodePolicy, err := requestFor(pod, d)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	out := make(extenderv1.HostPriorityList, len(names))
	var fits []string
	var at []int // fits[k] is names[at[k]]
	var fullness []int64
	for i, name := range names {
		if err := given(ctx, i); err != nil {
			return nil, err
		}
		out[i].Host = name
		n, reason := p.nodes.NodeFor(name, pod.UID)
		if reason != nil || fit.Fits(n, req, d.Options) != nil {
			continue
		}
		fits, at, fullness = append(fits, name), append(at, i), append(fullness, fit.Fullness(n))
	}
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	for k, score := range p.rank(fits, fullness, nodePolicy, sc) {
		out[at[k]].Score = score
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Host < out[b].Host })
	return out, nil
}

// given is ctx's error, looked at every 64th node so that a call over
// thousands of nodes stops soon after its caller gives up.
func given(ctx context.Context, i int) error {
	if i%64 != 0 || ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("stopped after %d nodes: the caller gave up (%w)", i, context.Cause(ctx))
}
