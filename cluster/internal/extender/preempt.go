package extender

import (
	"context"
	"fmt"
	"math"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
)

// Residents is what preemption reads of the books: a node's GPUs with
// nothing booked, and the pods booked there, keyed by UID.
type Residents interface {
	Residents(node string) (fit.Node, []fit.Resident, *fit.Reason)
}

// maxPreemptNodes bounds the nodes one preempt call weighs: kube-scheduler
// sends at most its candidates, a cluster's nodes.
const maxPreemptNodes = 5000

// Preempt answers kube-scheduler's preempt verb: of the victims it
// proposes on each node (from its own view, in which gpumem and gpucores
// are nothing), the answer keeps them all and adds the fewest
// lower-priority pods whose slices, once freed, let pod fit by vgpud's
// own rules (fit.Preempt); a node where none would is left out, so
// kube-scheduler evicts nothing there. kube-scheduler counts the PDBs
// its own victims violate, not vgpud's additions, and deletes them all
// (docs/how-it-works.md, "Not yet").
func (p *Placer) Preempt(ctx context.Context, pod *slimpod.Pod, proposed map[string]*extenderv1.MetaVictims) (map[string]*extenderv1.MetaVictims, error) {
	if p.residents == nil {
		return nil, fmt.Errorf("vgpud's extender cannot weigh preemption here")
	}
	if len(proposed) > maxPreemptNodes {
		return nil, fmt.Errorf("%d candidate nodes, more than the %d one preempt call weighs", len(proposed), maxPreemptNodes)
	}
	d := p.policy.Get()
	req, _, err := requestFor(pod, d)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	out := make(map[string]*extenderv1.MetaVictims, len(proposed))
	i := 0
	for node, mv := range proposed {
		if err := given(ctx, i); err != nil {
			return nil, err
		}
		i++
		bare, residents, reason := p.residents.Residents(node)
		if reason != nil {
			continue
		}
		var must []string
		if mv != nil {
			for _, v := range mv.Pods {
				if v != nil {
					must = append(must, v.UID)
				}
			}
		}
		residents = p.weigh(residents, pod)
		got, ok := fit.Preempt(bare, residents, must, pod.Priority, req, d.Options)
		if !ok {
			continue
		}
		res := &extenderv1.MetaVictims{}
		if mv != nil {
			res.NumPDBViolations = mv.NumPDBViolations
		}
		// kube-scheduler's victims that vgpud does not book (they free
		// what only it counts) stay as it chose them.
		seen := map[string]bool{}
		for _, uid := range append(must, got.Victims...) {
			if !seen[uid] {
				seen[uid] = true
				res.Pods = append(res.Pods, &extenderv1.MetaPod{UID: uid})
			}
		}
		out[node] = res
	}
	if len(out) > 0 && p.preemptAsked != nil {
		// kube-scheduler preempts for the pod: the leader leaves it be.
		p.preemptAsked(pod.UID)
	}
	return out, nil
}

// Choice is where the leader's own preemption makes room for a pod: the
// node, and the victims there, lowest priority first.
type Choice struct {
	Node    string
	Victims []fit.Resident
}

// NodeLister lists the nodes the leader's own preemption weighs where
// kube-scheduler's candidates for the pod are not kept.
type NodeLister interface {
	NodeNames() []string
}

// Choose is where evicting the fewest lower-priority pods (then the
// lowest priorities, then the node's name) lets pod fit by vgpud's own
// rules, over the nodes kube-scheduler sent when Filter refused pod (else
// every node the books know) that names admits and no other pod holds;
// ok is false where pod fits some node already, or will once pods
// already ending end, or where no preemption helps it.
func (p *Placer) Choose(ctx context.Context, pod *slimpod.Pod, nodes NodeLister, names func(node string) bool) (Choice, bool, error) {
	if p.residents == nil {
		return Choice{}, false, nil
	}
	d := p.policy.Get()
	req, _, err := requestFor(pod, d)
	if err != nil {
		return Choice{}, false, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	// The nodes kube-scheduler sent when the extender refused the pod
	// passed every filter of its own; the books' nodes otherwise.
	all := p.candidates(pod.UID)
	if all == nil {
		all = nodes.NodeNames()
	}
	slices.Sort(all)
	var best Choice
	var bestCost fit.Preemption
	found := false
	for i, node := range all {
		if err := given(ctx, i); err != nil {
			return Choice{}, false, err
		}
		if !names(node) || p.reservedAgainst(node, pod) {
			continue
		}
		n, reason := p.nodes.NodeFor(node, pod.UID)
		if reason != nil {
			continue
		}
		if fit.Fits(n, req, d.Options) == nil {
			return Choice{}, false, nil // room already: kube-scheduler places it
		}
		bare, residents, reason := p.residents.Residents(node)
		if reason != nil {
			continue
		}
		residents = p.weigh(residents, pod)
		byKey := make(map[string]fit.Resident, len(residents))
		for _, r := range residents {
			byKey[r.Key] = r
		}
		got, ok := fit.Preempt(bare, residents, nil, pod.Priority, req, d.Options)
		if ok && len(got.Victims) == 0 {
			return Choice{}, false, nil // room once pods already ending end
		}
		if !ok || (found && !got.Better(bestCost)) {
			continue
		}
		best, bestCost, found = Choice{Node: node}, got, true
		for _, k := range got.Victims {
			best.Victims = append(best.Victims, byKey[k])
		}
	}
	return best, found, nil
}

// weigh gives each resident its priority from the informer, leaving out
// pod itself; one the informer does not show is never a victim, and one
// already ending is going.
func (p *Placer) weigh(residents []fit.Resident, pod *slimpod.Pod) []fit.Resident {
	residents = slices.DeleteFunc(residents, func(r fit.Resident) bool { return r.Key == string(pod.UID) })
	for j := range residents {
		residents[j].Priority = math.MaxInt32
		if known := p.lookup(residents[j].Namespace, residents[j].Name); known != nil && string(known.UID) == residents[j].Key {
			residents[j].Priority = known.Priority
			residents[j].Going = known.DeletionTimestamp != nil
		}
	}
	return residents
}

// maxRefusals bounds the refused pods whose candidate nodes are kept.
const maxRefusals = 64

// remember keeps the nodes kube-scheduler sent for a pod Filter refused.
func (p *Placer) remember(pod types.UID, names []string) {
	p.refusalsMu.Lock()
	defer p.refusalsMu.Unlock()
	if p.refusals == nil {
		p.refusals = map[types.UID][]string{}
	}
	if _, ok := p.refusals[pod]; !ok && len(p.refusals) >= maxRefusals {
		for k := range p.refusals {
			delete(p.refusals, k)
			break
		}
	}
	p.refusals[pod] = slices.Clone(names)
}

// candidates are the nodes kube-scheduler last sent for pod when Filter
// refused it; nil where none are kept.
func (p *Placer) candidates(pod types.UID) []string {
	p.refusalsMu.Lock()
	defer p.refusalsMu.Unlock()
	return slices.Clone(p.refusals[pod])
}
