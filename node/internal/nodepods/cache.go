// Package nodepods is the node role's view of the pods on its own node: an
// informer with a field selector, so Allocate reads memory, never the API,
// and the phase annotation it writes back.
package nodepods

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Index holds the pods bound to one node.
type Index struct {
	pods     corev1client.PodsGetter
	node     string
	informer cache.SharedIndexInformer

	mu      sync.Mutex
	changed chan struct{}
}

// New returns a cache of node's pods; call Start, then WaitForSync. pods
// is a typed client, whose streaming list the informer uses, or a fake that
// says it has none (IsWatchListSemanticsUnSupported).
func New(pods corev1client.PodsGetter, node string) (*Index, error) {
	onNode := fields.OneTermEqualSelector("spec.nodeName", node).String()
	// The typed client, not client-go's informer factory: the factory's
	// constructors take the whole clientset, which links every API group's
	// client into the binary.
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = onNode
			return pods.Pods("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = onNode
			return pods.Pods("").Watch(ctx, o)
		},
	}, pods)
	informer := cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{})
	if err := informer.SetTransform(trim); err != nil {
		return nil, fmt.Errorf("watch pods of node %s: %w", node, err)
	}
	c := &Index{pods: pods, node: node, informer: informer, changed: make(chan struct{})}
	notify := func(any) { c.notify() }
	if _, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, n any) { notify(n) },
		DeleteFunc: notify,
	}); err != nil {
		return nil, fmt.Errorf("watch pods of node %s: %w", node, err)
	}
	return c, nil
}

// Start runs the informer until ctx ends.
func (c *Index) Start(ctx context.Context) { go c.informer.RunWithContext(ctx) }

// WaitForSync blocks until the first list is in, or ctx ends.
func (c *Index) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced)
}

// HasSynced reports whether the first list is in.
func (c *Index) HasSynced() bool { return c.informer.HasSynced() }

// List returns the node's pods. They are the cache's own: do not modify.
func (c *Index) List() []*corev1.Pod {
	objs := c.informer.GetStore().List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

// Get returns the node's pod of that namespace and name, nil if the
// informer holds none. It is the cache's own: do not modify.
func (c *Index) Get(namespace, name string) *corev1.Pod {
	obj, ok, err := c.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	p, _ := obj.(*corev1.Pod)
	return p
}

// Fresh reads the node's pods from the API, not the informer: a
// consistent list that shows every pod kubelet can know of.
func (c *Index) Fresh(ctx context.Context) ([]*corev1.Pod, error) {
	list, err := c.pods.Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", c.node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list pods of node %s: %w", c.node, err)
	}
	out := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// Changed returns a channel closed at the next change to any pod.
func (c *Index) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

func (c *Index) notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.changed)
	c.changed = make(chan struct{})
}
