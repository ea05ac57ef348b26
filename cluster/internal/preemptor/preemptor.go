// Package preemptor is the leader's own preemption. kube-scheduler
// proposes victims only from its own view, in which gpumem and gpucores
// are nothing: a GPU full by memory with free slots shows it room, so it
// proposes none and never asks the extender's preempt verb, and a
// higher-priority pod waits for ever. Where the extender refused a pod
// and kube-scheduler did not ask to preempt for it, the leader picks the
// fewest lower-priority pods on one node whose slices, once freed, let it
// fit (extender.Placer.Choose), evicts them through the Eviction API
// (PodDisruptionBudgets and graceful termination honoured), and holds the
// node for the pod (Placer.Nominate) until it binds. The books free the
// victims' slices only when they end.
package preemptor

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/vgpud/vgpud/cluster/internal/extender"
	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
)

// settle is how long after a refusal the leader leaves the pod to
// kube-scheduler's own preemption, which runs in the same scheduling
// cycle and asks the extender's preempt verb where it proposes victims.
const settle = 2 * time.Second

// hold is how long a node stays held for the pod that preempted there:
// past its victims' graceful termination, no longer.
const hold = 2 * time.Minute

// retry is how long a pod whose victim's eviction a disruption budget
// refused waits before it is weighed again.
const retry = 15 * time.Second

// Chooser is what the preemptor asks of the extender's placer.
type Chooser interface {
	Choose(ctx context.Context, pod *slimpod.Pod, nodes extender.NodeLister, names func(node string) bool) (extender.Choice, bool, error)
	Nominate(node string, pod *slimpod.Pod)
	Unnominate(pod types.UID)
}

// Deps are what a Preemptor reads and writes through.
type Deps struct {
	Choose Chooser
	Books  extender.NodeLister
	// Node is the informer's node of that name; nil for none.
	Node   func(name string) *corev1.Node
	Lookup extender.PodLookup
	API    corev1client.PodsGetter
	// Fence errs where this replica does not lead: it evicts nothing.
	Fence  func() error
	Events func(pod *corev1.Pod, reason, message string)
	Clock  clock.WithTicker
	Log    *slog.Logger
}

// Preemptor weighs each refused pod once kube-scheduler has had its turn.
type Preemptor struct {
	d Deps

	mu      sync.Mutex
	pending map[types.UID]refusal
	asked   map[types.UID]time.Time // kube-scheduler asked to preempt for it
	held    map[types.UID]nominee
}

type refusal struct {
	namespace, name string
	at              time.Time
}

// nominee is a pod the leader preempted for, and how long its node is held.
type nominee struct {
	namespace, name string
	until           time.Time
}

// New returns a Preemptor over d.
func New(d Deps) *Preemptor {
	return &Preemptor{d: d, pending: map[types.UID]refusal{}, asked: map[types.UID]time.Time{}, held: map[types.UID]nominee{}}
}

// Refused is told of each pod the extender found no node for.
func (p *Preemptor) Refused(pod *slimpod.Pod) {
	if pod.PreemptNever || pod.NodeName != "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.pending[pod.UID]; !ok {
		p.pending[pod.UID] = refusal{namespace: pod.Namespace, name: pod.Name, at: p.d.Clock.Now()}
	}
}

// Asked is told of each pod kube-scheduler asked the extender to preempt
// for: that is kube-scheduler's preemption, not the leader's.
func (p *Preemptor) Asked(pod types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked[pod] = p.d.Clock.Now()
}

// Run weighs the refused pods every second until ctx ends.
func (p *Preemptor) Run(ctx context.Context) error {
	t := p.d.Clock.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			p.round(ctx)
		}
	}
}

// round lets go of the nominations that ended and weighs the refusals
// that have settled.
func (p *Preemptor) round(ctx context.Context) {
	now := p.d.Clock.Now()
	var due []refusal
	var dueUID []types.UID
	p.mu.Lock()
	for uid, h := range p.held {
		// Bound, gone, or past its time: the node is let go.
		if pod := p.d.Lookup(h.namespace, h.name); now.After(h.until) || pod == nil || pod.UID != uid || pod.NodeName != "" {
			delete(p.held, uid)
			p.d.Choose.Unnominate(uid)
		}
	}
	for uid, r := range p.pending {
		if now.Sub(r.at) < settle {
			continue
		}
		delete(p.pending, uid)
		if at, ok := p.asked[uid]; ok && !at.Before(r.at) {
			continue
		}
		if _, ok := p.held[uid]; ok {
			continue // its victims are still going
		}
		due, dueUID = append(due, r), append(dueUID, uid)
	}
	for uid, at := range p.asked {
		if now.Sub(at) > hold {
			delete(p.asked, uid)
		}
	}
	p.mu.Unlock()
	for i, r := range due {
		if err := p.preempt(ctx, dueUID[i], r); err != nil {
			p.d.Log.Warn("preemption for a refused pod", "pod", r.namespace+"/"+r.name, "err", err)
		}
	}
}

// preempt makes room for the pod, if evicting lower-priority pods can.
func (p *Preemptor) preempt(ctx context.Context, uid types.UID, r refusal) error {
	sp := p.d.Lookup(r.namespace, r.name)
	if sp == nil || sp.UID != uid || sp.NodeName != "" || sp.DeletionTimestamp != nil || sp.PreemptNever || sp.Nominated != "" {
		return nil // bound, gone, or kube-scheduler's to preempt for
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	full, err := p.d.API.Pods(r.namespace).Get(ctx, r.name, metav1.GetOptions{})
	if err != nil || full.UID != uid {
		return err
	}
	choice, ok, err := p.d.Choose.Choose(ctx, sp, p.d.Books, p.admits(full))
	if err != nil || !ok {
		return err
	}
	if err := p.d.Fence(); err != nil {
		return nil // another replica leads now
	}
	eviction := func(v fit.Resident, dry bool) error {
		opts := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(types.UID(v.Key))}}
		if dry {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		return p.d.API.Pods(v.Namespace).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: v.Name, Namespace: v.Namespace}, DeleteOptions: opts})
	}
	// Every victim's disruption budget is asked first (a dry run), so
	// that a refusal evicts none of them, rather than some in vain.
	for _, v := range choice.Victims {
		if err := eviction(v, true); apierrors.IsTooManyRequests(err) {
			p.d.Events(sp.Ref(), "PreemptionBlocked", fmt.Sprintf("a disruption budget keeps pod %s/%s from eviction on node %s, so vgpud evicts none there; tried again in %s", v.Namespace, v.Name, choice.Node, retry))
			p.mu.Lock()
			p.pending[uid] = refusal{namespace: r.namespace, name: r.name, at: p.d.Clock.Now().Add(retry - settle)}
			p.mu.Unlock()
			return nil
		}
	}
	var evicted []string
	for _, v := range choice.Victims {
		err := eviction(v, false)
		switch {
		case err == nil:
			evicted = append(evicted, v.Namespace+"/"+v.Name)
			if vp := p.d.Lookup(v.Namespace, v.Name); vp != nil && string(vp.UID) == v.Key {
				p.d.Events(vp.Ref(), "Preempted", fmt.Sprintf("evicted by vgpud for pod %s/%s (priority %d), which needs this pod's GPU slice on node %s", r.namespace, r.name, sp.Priority, choice.Node))
			}
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone, or another pod now by that name: its slice frees anyway.
		case apierrors.IsTooManyRequests(err):
			p.d.Events(sp.Ref(), "PreemptionBlocked", fmt.Sprintf("a disruption budget keeps pod %s/%s from eviction on node %s; evicted so far: %s; tried again in %s", v.Namespace, v.Name, choice.Node, list(evicted), retry))
			p.mu.Lock()
			p.pending[uid] = refusal{namespace: r.namespace, name: r.name, at: p.d.Clock.Now().Add(retry - settle)}
			p.mu.Unlock()
			return nil
		default:
			return fmt.Errorf("evict %s/%s: %w", v.Namespace, v.Name, err)
		}
	}
	p.d.Choose.Nominate(choice.Node, sp)
	p.mu.Lock()
	p.held[uid] = nominee{namespace: r.namespace, name: r.name, until: p.d.Clock.Now().Add(hold)}
	p.mu.Unlock()
	p.d.Events(sp.Ref(), "Preempting", fmt.Sprintf("vgpud evicted %s of lower priority on node %s, whose GPU memory or cores this pod needs (kube-scheduler, which sees free GPU slots there, proposed none); the node is held for it", list(evicted), choice.Node))
	p.d.Log.Info("preempted for a pod", "pod", r.namespace+"/"+r.name, "priority", sp.Priority, "node", choice.Node, "victims", evicted)
	return nil
}

// admits is whether kube-scheduler could place pod on a node by what it
// checks besides resources: the node schedulable, its required node
// affinity and selector, and no taint it does not tolerate.
func (p *Preemptor) admits(pod *corev1.Pod) func(node string) bool {
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	return func(name string) bool {
		n := p.d.Node(name)
		if n == nil || n.Spec.Unschedulable {
			return false
		}
		if ok, err := affinity.Match(n); err != nil || !ok {
			return false
		}
		_, untolerated := v1helper.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, true)
		return !untolerated
	}
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
