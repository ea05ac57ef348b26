package extender

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Bind places the pod on args.Node and binds it there, or says why not.
func (b *Binder) Bind(ctx context.Context, args extenderv1.ExtenderBindingArgs) error {
	waited, err := b.bind(ctx, args)
	outcome, reason := outcomeOf(err)
	b.observe(outcome, reason, waited)
	if err != nil {
		b.log.Warn("bind failed", "pod", args.PodNamespace+"/"+args.PodName, "node", args.Node, "err", err)
	}
	return err
}

// Queued is how many binds to node are under way: waiting for the pod
// bound there before to be allocated, or committing. Where the runtime
// names pods no bind waits for another pod, so none counts as queued:
// a burst packs there as the policy says.
func (b *Binder) Queued(node string) int {
	// The filter asks this of every candidate node: ask the books only
	// when a bind is under way there.
	n := b.queue.Queued(node)
	if n > 0 && b.books.NamesPods(node) {
		return 0
	}
	return n
}

// lock returns the mutex for key in locks, made on first use.
func (b *Binder) lock(locks map[string]*sync.Mutex, key string) *sync.Mutex {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, ok := locks[key]
	if !ok {
		l = &sync.Mutex{}
		locks[key] = l
	}
	return l
}

func (b *Binder) bind(ctx context.Context, args extenderv1.ExtenderBindingArgs) (waited time.Duration, err error) {
	if args.PodUID == "" {
		return 0, because(ReasonNotBindable, fmt.Errorf("bind pod %s/%s: no PodUID; vgpud binds a pod only by UID, so a recreated pod is never bound in its place", args.PodNamespace, args.PodName))
	}
	start := b.clock.Now()
	b.queue.enter(args.Node)
	defer b.queue.leave(args.Node)
	// One bind places under one set of defaults, however long it waits.
	h := held{defaults: b.cfg.Policy.Get()}
	defer func() {
		// A booking whose Binding went unanswered is settle's to decide.
		if err != nil && h.token != 0 && !errors.Is(err, errUnanswered) {
			b.books.Release(args.PodUID, h.token)
		}
	}()
	// The informer's copy of the pod saves a read: the Binding is
	// conditional on its resourceVersion, so a stale copy only costs a
	// conflict, and then the pod is read afresh and everything checked
	// again.
	cached := b.lookup(args.PodNamespace, args.PodName)
	if cached != nil && cached.UID != args.PodUID {
		cached = nil
	}
	// Only a bind that will wait has room to hold: one that goes straight
	// on books its pod at once anyway.
	if cached != nil && (b.books.InFlight(args.Node, args.PodUID) != "" || b.queue.Queued(args.Node) > 1) {
		b.reserve(args, cached, &h)
	}
	// Lock order: node, then namespace, then fit.
	lock := b.lock(b.nodeLocks, args.Node)
	lock.Lock()
	defer lock.Unlock()
	if err := b.waitForNode(ctx, args.Node, args.PodUID); err != nil {
		return b.clock.Since(start), because(ReasonNodeBusy, err)
	}
	waited = b.clock.Since(start)
	// Binds in a namespace with a vGPU quota are serialised, so two cannot
	// both fit the last of it; other namespaces bind in parallel.
	defer b.LockQuota(args.PodNamespace)()
	if cached != nil {
		if err := b.place(ctx, args, cached, &h); !errors.Is(err, errStale) {
			return waited, err
		}
	}
	pod, err := b.api.Pods(args.PodNamespace).Get(ctx, args.PodName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return waited, because(ReasonPodChanged, fmt.Errorf("pod %s/%s no longer exists", args.PodNamespace, args.PodName))
	}
	if err != nil {
		return waited, fmt.Errorf("get pod %s/%s: %w", args.PodNamespace, args.PodName, err)
	}
	return waited, b.place(ctx, args, slimpod.Of(pod, b.cfg.Names), &h)
}

// held is what one bind booked last, to take back if it fails: the token
// of its last booking, 0 while it has none.
type held struct {
	token    uint64
	defaults Defaults // the defaults in force when the bind arrived
}

// reserve books the pod's room on the node as soon as its bind arrives,
// before it waits for the node's in-flight pod: filters meanwhile count
// it, so kube-scheduler does not send a second pod to the same last room
// only to have that bind refused ("no longer fits") and retried. The
// place after the wait fits again, leaving this booking out (NodeFor),
// and replaces it. A pod that does not fit now, or fails any check,
// reserves nothing and is decided after the wait. Meanwhile the
// booking counts in its namespace's quota for the other binds there: a
// bind that then fails gives it back (Release), and kube-scheduler
// retries whatever it refused.
func (b *Binder) reserve(args extenderv1.ExtenderBindingArgs, pod *slimpod.Pod, h *held) {
	req, opts, err := b.request(pod, args.PodUID, h.defaults)
	if err != nil {
		return
	}
	defer b.LockQuota(pod.Namespace)()
	// What fails here is decided, and said, after the wait.
	_, _, _ = b.book(args.Node, pod, req, opts, h)
}

// place checks pod, fits it on args.Node, books it and binds it there.
// Fit and booking hold the node's fit lock, as reserve does, so no two
// pods are fitted into the same room.
func (b *Binder) place(ctx context.Context, args extenderv1.ExtenderBindingArgs, pod *slimpod.Pod, h *held) error {
	req, opts, err := b.request(pod, args.PodUID, h.defaults)
	if err != nil {
		return err
	}
	a, raw, err := b.book(args.Node, pod, req, opts, h)
	if err != nil {
		return err
	}
	return b.commit(ctx, pod, a, raw, h.token)
}

// request checks pod (bindable) and reads what it asks for under d, the
// bind's defaults, which it then places it with.
func (b *Binder) request(pod *slimpod.Pod, uid types.UID, d Defaults) (fit.Request, fit.Options, error) {
	if err := b.bindable(pod, uid); err != nil {
		return fit.Request{}, fit.Options{}, err
	}
	req, _, err := requestFor(pod, d)
	if err != nil {
		return fit.Request{}, fit.Options{}, because(ReasonNotBindable, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err))
	}
	return req, d.Options, nil
}

// book fits the pod on node under the node's fit lock, checks its quota
// and books it.
func (b *Binder) book(nodeName string, pod *slimpod.Pod, req fit.Request, opts fit.Options, h *held) (protocol.Assignment, string, error) {
	lock := b.lock(b.fitLocks, nodeName)
	lock.Lock()
	defer lock.Unlock()
	node, reason := b.books.NodeFor(nodeName, pod.UID)
	var pl podmodel.Placement
	if reason == nil {
		pl, reason = fit.Place(node, req, opts)
	}
	if reason != nil {
		return protocol.Assignment{}, "", because(ReasonNoLongerFits, fmt.Errorf("node %s no longer fits pod %s/%s: %s", nodeName, pod.Namespace, pod.Name, reason.Text))
	}
	if err := b.checkQuota(pod, pl, node); err != nil {
		return protocol.Assignment{}, "", err
	}
	a := pl.Assignment(nodeName)
	raw, err := protocol.EncodeAssignment(a)
	if err != nil {
		return protocol.Assignment{}, "", fmt.Errorf("encode assignment of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if err := b.fence(); err != nil {
		return protocol.Assignment{}, "", because(ReasonNotLeader, fmt.Errorf("pod %s/%s not bound: %w", pod.Namespace, pod.Name, err))
	}
	// Booked first, so the next filter already counts the pod.
	token, ok := b.books.Book(pod, a, raw, h.token)
	if !ok {
		return protocol.Assignment{}, "", because(ReasonInProgress, fmt.Errorf("pod %s/%s: another bind of it is still under way; kube-scheduler retries it", pod.Namespace, pod.Name))
	}
	h.token = token
	return a, raw, nil
}

// bindable refuses what kube-scheduler's vgpud profile would never ask:
// a pod recreated under the name, already bound, of another scheduler, or
// carrying any assignment.
func (b *Binder) bindable(pod *slimpod.Pod, uid types.UID) error {
	id := pod.Namespace + "/" + pod.Name
	switch {
	case pod.UID != uid:
		return because(ReasonPodChanged, fmt.Errorf("pod %s was recreated (uid %s, scheduler asked for %s)", id, pod.UID, uid))
	case pod.NodeName != "":
		return because(ReasonPodChanged, fmt.Errorf("pod %s is already bound to %s; vgpud binds only pods without a node", id, pod.NodeName))
	case pod.SchedulerName != b.cfg.Scheduler:
		return because(ReasonMisconfigured, fmt.Errorf("pod %s has schedulerName %q; vgpud binds only pods of %q (--scheduler-name): the kube-scheduler profile that calls vgpud must have that name", id, pod.SchedulerName, b.cfg.Scheduler))
	case pod.Terminated() || pod.DeletionTimestamp != nil:
		return because(ReasonPodChanged, fmt.Errorf("pod %s is finished or being deleted", id))
	}
	return because(ReasonNotBindable, carriesNoAssignment(pod))
}

// carriesNoAssignment refuses a pod that already carries an assignment.
// vgpud writes one only in a Binding, with the node, so a pod without a
// node never has one from vgpud, and the apiserver lets no one else write
// it (manifests/: the ValidatingAdmissionPolicy). Whatever it is, it is
// not bound over.
func carriesNoAssignment(pod *slimpod.Pod) error {
	if !pod.HasAssignment {
		return nil
	}
	return fmt.Errorf("pod %s/%s carries a %s annotation but no node, which vgpud never writes; vgpud will not bind over it: delete the pod and create it again",
		pod.Namespace, pod.Name, wellknown.AnnotationAssignment)
}

// waitForNode blocks while another pod on node is bound but not yet
// allocated, up to the configured wait; then kube-scheduler retries, maybe elsewhere.
func (b *Binder) waitForNode(ctx context.Context, node string, self types.UID) error {
	deadline := b.clock.NewTimer(b.cfg.Wait)
	defer deadline.Stop()
	for {
		changed := b.books.InFlightChanged(node)
		busy := b.books.InFlight(node, self)
		if busy == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: waiting for pod %s to be allocated: %w", node, busy, ctx.Err())
		case <-deadline.C():
			if busy = b.books.InFlight(node, self); busy == "" {
				return nil
			}
			return fmt.Errorf("node %s: pod %s is bound but kubelet has not allocated its GPUs after %s; binding another pod there now could hand it the wrong GPUs", node, busy, b.cfg.Wait)
		case <-changed:
		case <-b.clock.After(100 * time.Millisecond): // a deleted pod's slot runs out by the clock
		}
	}
}

// errStale is a conflict on the Binding: the pod changed since it was
// read.
var errStale = errors.New("the pod changed since vgpud read it")

// commit writes the booked assignment and the node in one Binding. The
// apiserver copies a Binding's annotations onto the pod as it sets
// spec.nodeName, under the UID and resourceVersion we read: a pod never
// carries an assignment without its node or the other way round, and a
// concurrent change (or a pod recreated under the name) fails with a
// conflict instead of being overwritten. (A Binding, so vgpud's Role
// needs no update on pods.) On a refusal the bind takes the booking back;
// a Binding that got no answer holds it until it can tell (settle).
func (b *Binder) commit(ctx context.Context, pod *slimpod.Pod, a protocol.Assignment, raw string, token uint64) error {
	annotations := map[string]string{wellknown.AnnotationAssignment: raw}
	// Where the node guesses which pod kubelet admits, it finds the one
	// bound and waiting by this phase; where the runtime names pods,
	// nothing needs it.
	if !b.books.NamesPods(a.Node) {
		annotations[wellknown.AnnotationPhase] = string(protocol.PhaseBound)
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion, Annotations: annotations},
		Target:     corev1.ObjectReference{Kind: "Node", Name: a.Node},
	}
	if err := b.api.Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		switch {
		case apierrors.IsConflict(err):
			return because(ReasonPodChanged, fmt.Errorf("bind pod %s/%s to %s: %w: %w", pod.Namespace, pod.Name, a.Node, errStale, err))
		case b.boundAnyway(pod, a.Node, raw):
			// The Binding landed though its answer was lost (a timeout):
			// the pod runs there, and its assignment must stay booked.
			b.log.Warn("Binding answered with an error but the pod is bound; keeping the assignment", "pod", pod.Namespace+"/"+pod.Name, "node", a.Node, "err", err)
		case unanswered(err):
			b.books.MarkBound(pod.UID, a.Node)
			b.startSettle(func() { b.settle(pod, a.Node, raw, token) })
			return because(ReasonUnanswered, fmt.Errorf("bind pod %s/%s to %s: %w: %w; its room there, and the node for other binds, stay held for up to %s until vgpud can tell",
				pod.Namespace, pod.Name, a.Node, errUnanswered, err, b.cfg.UnansweredHold))
		case apierrors.IsNotFound(err):
			return because(ReasonPodChanged, fmt.Errorf("bind pod %s/%s to %s: the pod is gone: %w", pod.Namespace, pod.Name, a.Node, err))
		case apierrors.IsForbidden(err):
			// The vgpud-own-writes policy refuses a Binding from a replica
			// that does not hold the Lease.
			return because(ReasonNotLeader, fmt.Errorf("bind pod %s/%s to %s: %w", pod.Namespace, pod.Name, a.Node, err))
		default:
			return fmt.Errorf("bind pod %s/%s to %s: %w", pod.Namespace, pod.Name, a.Node, err)
		}
	}
	// Bound: the pod is in flight on its node until kubelet allocates it
	// (where the node guesses). kube-scheduler's own Scheduled event and
	// the assignment on the pod say the rest; Events are for refusals.
	b.books.MarkBound(pod.UID, a.Node)
	return nil
}

// boundAnyway re-reads the pod after a failed Binding: if it is bound to
// node with this assignment all the same, the bind succeeded.
func (b *Binder) boundAnyway(pod *slimpod.Pod, node, raw string) bool {
	// Read even when the term has just ended: the answer is the bind's.
	landed, err := b.landed(context.WithoutCancel(b.term), pod, node, raw)
	return err == nil && landed
}
