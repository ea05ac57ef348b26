package extender

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/vgpud/vgpud/cluster/core"
	"github.com/vgpud/vgpud/protocol"
)

// Books is the cache as bind needs it.
type Books interface {
	Nodes
	Book(pod *corev1.Pod, a protocol.Assignment)
	DeletePod(uid types.UID)
	InFlight(node string, except types.UID) string
}

// Binder commits placements: the leader is the only binder, so binds to a
// node are ordered here in memory instead of by an annotation lock.
type Binder struct {
	kube     kubernetes.Interface
	books    Books
	names    protocol.ResourceNames
	defaults Defaults
	wait     time.Duration // how long a bind waits for the node's in-flight pod
	events   func(pod *corev1.Pod, reason, message string)
	log      *slog.Logger

	mu    sync.Mutex
	locks map[string]*sync.Mutex

	// observe is told of every bind's outcome and how long it waited for
	// the node's in-flight pod (metrics).
	observe func(ok bool, waited time.Duration)
}

// NewBinder returns a Binder; events and observe may be nil.
func NewBinder(kube kubernetes.Interface, books Books, names protocol.ResourceNames, d Defaults, wait time.Duration,
	events func(*corev1.Pod, string, string), observe func(ok bool, waited time.Duration), log *slog.Logger) *Binder {
	if events == nil {
		events = func(*corev1.Pod, string, string) {}
	}
	if observe == nil {
		observe = func(bool, time.Duration) {}
	}
	return &Binder{kube: kube, books: books, names: names, defaults: d, wait: wait, events: events, observe: observe, log: log, locks: map[string]*sync.Mutex{}}
}

// Bind places the pod on args.Node and binds it there, or says why not.
func (b *Binder) Bind(ctx context.Context, args extenderv1.ExtenderBindingArgs) error {
	waited, err := b.bind(ctx, args)
	b.observe(err == nil, waited)
	if err != nil {
		b.log.Warn("bind failed", "pod", args.PodNamespace+"/"+args.PodName, "node", args.Node, "err", err)
	}
	return err
}

func (b *Binder) nodeLock(node string) *sync.Mutex {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, ok := b.locks[node]
	if !ok {
		l = &sync.Mutex{}
		b.locks[node] = l
	}
	return l
}

func (b *Binder) bind(ctx context.Context, args extenderv1.ExtenderBindingArgs) (time.Duration, error) {
	start := time.Now()
	lock := b.nodeLock(args.Node)
	lock.Lock()
	defer lock.Unlock()
	err := b.waitForNode(ctx, args.Node, args.PodUID)
	waited := time.Since(start)
	if err != nil {
		return waited, err
	}
	return waited, b.place(ctx, args)
}

func (b *Binder) place(ctx context.Context, args extenderv1.ExtenderBindingArgs) error {
	pods := b.kube.CoreV1().Pods(args.PodNamespace)
	pod, err := pods.Get(ctx, args.PodName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("pod %s/%s no longer exists", args.PodNamespace, args.PodName)
	}
	if err != nil {
		return fmt.Errorf("get pod %s/%s: %w", args.PodNamespace, args.PodName, err)
	}
	if args.PodUID != "" && pod.UID != args.PodUID {
		return fmt.Errorf("pod %s/%s was recreated (uid %s, scheduler asked for %s)", args.PodNamespace, args.PodName, pod.UID, args.PodUID)
	}
	req, _, err := requestFor(pod, b.names, b.defaults)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	node, reason := b.books.Node(args.Node)
	if reason == nil {
		var res core.Result
		if res, reason = core.Fit(node, req, b.defaults.Options); reason == nil {
			return b.commit(ctx, pod, res.Placement.Assignment(args.Node))
		}
	}
	return fmt.Errorf("node %s no longer fits pod %s/%s: %s", args.Node, pod.Namespace, pod.Name, reason.Text)
}

// waitForNode blocks while another pod on node is bound but not yet
// allocated, up to b.wait; then kube-scheduler retries, maybe elsewhere.
func (b *Binder) waitForNode(ctx context.Context, node string, self types.UID) error {
	deadline := time.Now().Add(b.wait)
	for {
		busy := b.books.InFlight(node, self)
		if busy == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s: pod %s is bound but kubelet has not allocated its GPUs after %s; binding another pod there now could hand it the wrong GPUs", node, busy, b.wait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: waiting for pod %s to be allocated: %w", node, busy, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// commit writes the assignment under the pod's resourceVersion, books it,
// creates the Binding, and undoes both if the Binding fails.
func (b *Binder) commit(ctx context.Context, pod *corev1.Pod, a protocol.Assignment) error {
	raw, err := protocol.EncodeAssignment(a)
	if err != nil {
		return fmt.Errorf("encode assignment of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	updated := pod.DeepCopy()
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	updated.Annotations[protocol.AnnotationAssignment] = raw
	updated.Annotations[protocol.AnnotationPhase] = string(protocol.PhaseBound)
	// Update carries the resourceVersion we read: a concurrent change fails
	// with a conflict instead of being overwritten.
	updated, err = b.kube.CoreV1().Pods(pod.Namespace).Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("write assignment on pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	b.books.Book(updated, a)
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: a.Node},
	}
	if err := b.kube.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		b.books.DeletePod(pod.UID)
		b.undoAnnotations(pod)
		return fmt.Errorf("bind pod %s/%s to %s: %w", pod.Namespace, pod.Name, a.Node, err)
	}
	b.events(updated, "GPUsAssigned", fmt.Sprintf("bound to %s with %s", a.Node, describe(a)))
	return nil
}

// undoAnnotations removes what commit wrote, with its own deadline: the
// request may be gone, and a stale assignment would book GPUs after a
// leader restart.
func (b *Binder) undoAnnotations(pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:null}}}`, protocol.AnnotationAssignment, protocol.AnnotationPhase)
	if _, err := b.kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		b.log.Error("undo assignment after a failed bind", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

func describe(a protocol.Assignment) string {
	var parts []string
	for _, c := range a.Containers {
		for _, g := range c.GPUs {
			parts = append(parts, fmt.Sprintf("%s: %s %d MiB %d cores", c.Name, g.UUID, g.MemoryMiB, g.Cores))
		}
	}
	return strings.Join(parts, "; ")
}
