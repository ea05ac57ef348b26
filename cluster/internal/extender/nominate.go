package extender

import (
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
)

// nomination holds a node's GPUs, freed by the leader's own preemption,
// for the pod that preempted there, until it binds or the leader lets go.
type nomination struct {
	pod      types.UID
	name     string // namespace/name, for the reason
	priority int32
}

// nominations is copied on write: Filter reads it once per call.
type nominations = map[string]nomination

// Nominate holds node for pod: Filter refuses the node to every other pod
// of pod's priority or lower, as kube-scheduler does for a pod it
// nominated, so that what the victims free is not taken first.
func (p *Placer) Nominate(node string, pod *slimpod.Pod) {
	p.nominateMu.Lock()
	defer p.nominateMu.Unlock()
	next := nominations{}
	if cur := p.nominated.Load(); cur != nil {
		next = maps.Clone(*cur)
	}
	next[node] = nomination{pod: pod.UID, name: pod.Namespace + "/" + pod.Name, priority: pod.Priority}
	p.nominated.Store(&next)
}

// Unnominate lets go of what pod holds, on any node.
func (p *Placer) Unnominate(pod types.UID) {
	p.nominateMu.Lock()
	defer p.nominateMu.Unlock()
	cur := p.nominated.Load()
	if cur == nil {
		return
	}
	next := maps.Clone(*cur)
	maps.DeleteFunc(next, func(_ string, n nomination) bool { return n.pod == pod })
	p.nominated.Store(&next)
}

// reservation is why node is held from pod; nil where it is not.
func reservation(held *nominations, node string, pod *slimpod.Pod) *fit.Reason {
	if held == nil {
		return nil
	}
	n, ok := (*held)[node]
	if !ok || n.pod == pod.UID || pod.Priority > n.priority {
		return nil
	}
	return &fit.Reason{Kind: "held for a preempting pod", Text: fmt.Sprintf("GPUs freed here are held for pod %s (priority %d), which preempted pods on this node", n.name, n.priority)}
}

// reservedAgainst says whether node is held from pod.
func (p *Placer) reservedAgainst(node string, pod *slimpod.Pod) bool {
	return reservation(p.nominated.Load(), node, pod) != nil
}
