package cluster

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// informers are the leader's watches: pods, nodes and ResourceQuotas, all
// through transform. They are built on the typed core client, not on
// client-go's informer factory, whose constructors take the whole clientset
// and so link every API group's client into the binary every node runs.
type informers struct {
	pods, nodes, quotas toolscache.SharedIndexInformer
	wg                  sync.WaitGroup
}

func newInformers(core corev1client.CoreV1Interface, transform toolscache.TransformFunc) (*informers, error) {
	s := &informers{
		pods: informer(core, &corev1.Pod{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return core.Pods("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.Pods("").Watch(ctx, o)
			}),
		nodes: informer(core, &corev1.Node{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return core.Nodes().List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.Nodes().Watch(ctx, o)
			}),
		quotas: informer(core, &corev1.ResourceQuota{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return core.ResourceQuotas("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.ResourceQuotas("").Watch(ctx, o)
			}),
	}
	for _, inf := range s.all() {
		if err := inf.SetTransform(transform); err != nil {
			return nil, fmt.Errorf("informer transform: %w", err)
		}
	}
	return s, nil
}

// informer is one shared informer indexed by namespace, as pods.Store and
// the quota lister read it. client says whether it can stream the initial
// list (fakes cannot).
func informer(client any, obj runtime.Object, list toolscache.ListWithContextFunc, w toolscache.WatchFuncWithContext) toolscache.SharedIndexInformer {
	lw := toolscache.ToListWatcherWithWatchListSemantics(&toolscache.ListWatch{ListWithContextFunc: list, WatchFuncWithContext: w}, client)
	return toolscache.NewSharedIndexInformerWithOptions(lw, obj, toolscache.SharedIndexInformerOptions{
		Indexers: toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc},
	})
}

func (s *informers) all() []toolscache.SharedIndexInformer {
	return []toolscache.SharedIndexInformer{s.pods, s.nodes, s.quotas}
}

// start runs every informer until ctx ends; stop waits for them.
func (s *informers) start(ctx context.Context) {
	for _, inf := range s.all() {
		s.wg.Go(func() { inf.RunWithContext(ctx) })
	}
}

// sync waits for every informer's first list, or for ctx.
func (s *informers) sync(ctx context.Context) error {
	for name, inf := range map[string]toolscache.SharedIndexInformer{"pods": s.pods, "nodes": s.nodes, "resourcequotas": s.quotas} {
		if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("sync %s informer: %w", name, ctx.Err())
		}
	}
	return nil
}

// stop waits until every informer started has returned.
func (s *informers) stop() { s.wg.Wait() }
