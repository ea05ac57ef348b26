package extender

import (
	"context"
	"fmt"
	"math"
	"slices"

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
// its own victims violate; vgpud's additions are evicted through the
// same API, which honours them.
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
		residents = slices.DeleteFunc(residents, func(r fit.Resident) bool { return r.Key == string(pod.UID) })
		for j := range residents {
			// A pod the informer does not show is never a victim.
			residents[j].Priority = math.MaxInt32
			if known := p.lookup(residents[j].Namespace, residents[j].Name); known != nil && string(known.UID) == residents[j].Key {
				residents[j].Priority = known.Priority
			}
		}
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
	return out, nil
}
