// Package cordon is the node's GPU cordon, for inspect: an operator's
// vgpud.io/cordon on this node, followed through a watch on the one Node
// object. The leader acts on it (its books read every node); the node
// role only shows it.
package cordon

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Watch follows one node's cordon annotations.
type Watch struct {
	nodes typedcorev1.NodesGetter
	node  string
	log   *slog.Logger

	// changes is told each change, without waiting: a node that serves
	// DRA claims publishes the cordon as device taints. synced is closed
	// once the node has been read.
	changes chan struct{}
	synced  chan struct{}

	mu  sync.Mutex
	now map[string]string // the node's cordon annotations, as last seen
}

// New returns the watch of node's cordon.
func New(nodes typedcorev1.NodesGetter, node string, log *slog.Logger) *Watch {
	return &Watch{nodes: nodes, node: node, log: log, changes: make(chan struct{}, 1), synced: make(chan struct{})}
}

// Synced is closed once the node's cordon has been read: before, no
// cordon reads as none.
func (w *Watch) Synced() <-chan struct{} { return w.synced }

// Changes is told when the cordon changes (at most one change waits).
func (w *Watch) Changes() <-chan struct{} { return w.changes }

// Run keeps the cordon current until ctx ends.
func (w *Watch) Run(ctx context.Context) error {
	self := fields.OneTermEqualSelector("metadata.name", w.node).String()
	nodes := w.nodes.Nodes()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = self
			return nodes.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = self
			return nodes.Watch(ctx, o)
		},
	}
	informer := cache.NewSharedIndexInformerWithOptions(lw, &corev1.Node{}, cache.SharedIndexInformerOptions{})
	set := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		now := map[string]string{}
		for _, k := range []string{wellknown.AnnotationCordon, wellknown.AnnotationCordonHAMi} {
			if v, ok := n.Annotations[k]; ok {
				now[k] = v
			}
		}
		w.mu.Lock()
		changed := !maps.Equal(now, w.now)
		w.now = now
		w.mu.Unlock()
		if changed {
			w.log.Info("GPU cordon on this node", "cordon", now)
			select {
			case w.changes <- struct{}{}:
			default:
			}
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, n any) { set(n) },
		DeleteFunc: func(any) { set(&corev1.Node{}) },
	}); err != nil {
		return fmt.Errorf("watch node %s for its GPU cordon: %w", w.node, err)
	}
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			close(w.synced)
		}
	}()
	informer.RunWithContext(ctx)
	return nil
}

// Mark marks which of gpus the node's cordon names, as last seen, and
// says what in it names no GPU here or cannot be read.
func (w *Watch) Mark(gpus []protocol.GPU, mig map[string]*protocol.MIGRef) (cordoned []bool, problem string) {
	w.mu.Lock()
	now := w.now
	w.mu.Unlock()
	return cordonOf(now, gpus, mig)
}

// cordonOf marks which of gpus the cordon annotations name, and says
// what in them names no GPU here or cannot be read.
func cordonOf(annotations map[string]string, gpus []protocol.GPU, mig map[string]*protocol.MIGRef) (cordoned []bool, problem string) {
	cd, err := protocol.NodeCordon(annotations)
	if err != nil {
		return make([]bool, len(gpus)), err.Error() + "; the leader places nothing on this node until it reads"
	}
	cordoned, unknown := cd.Resolve(gpus, mig)
	if len(unknown) > 0 {
		problem = fmt.Sprintf("the cordon names %v, which this node does not have", unknown)
	}
	return cordoned, problem
}

// Cordoned are the UUIDs of inv's GPUs (in MIG mode too) the cordon
// names, as last seen; every one of them where it cannot be read, as
// the leader then places nothing on the node.
func (w *Watch) Cordoned(inv protocol.Inventory) map[string]bool {
	gpus := slices.Clone(inv.GPUs)
	for _, g := range inv.MIG {
		gpus = append(gpus, protocol.GPU{UUID: g.UUID, Index: g.Index, Model: g.Model})
	}
	w.mu.Lock()
	now := w.now
	w.mu.Unlock()
	out := map[string]bool{}
	cd, err := protocol.NodeCordon(now)
	marks := make([]bool, len(gpus))
	if err == nil {
		marks, _ = cd.Resolve(gpus, nil)
	}
	for i, g := range gpus {
		if err != nil || marks[i] {
			out[g.UUID] = true
		}
	}
	return out
}
