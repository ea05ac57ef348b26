// Package watches is the leader's informers: pods, nodes and
// ResourceQuotas, and DRA ResourceClaims where the cluster serves them.
package watches

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// Informers are the leader's watches: pods, nodes and ResourceQuotas, all
// through transform. They are built on the typed core client, not on
// client-go's informer factory, whose constructors take the whole clientset
// and so link every API group's client into the binary every node runs.
type Informers struct {
	Pods, Nodes, Quotas toolscache.SharedIndexInformer
	// Claims is nil where New was given no claims client.
	Claims toolscache.SharedIndexInformer
	wg     sync.WaitGroup
}

// New builds the informers on core, and on claims unless it is nil, each
// object through transform.
func New(core corev1client.CoreV1Interface, claims resourcev1client.ResourceClaimsGetter, transform toolscache.TransformFunc) (*Informers, error) {
	s := &Informers{
		Pods: informer(core, &corev1.Pod{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return core.Pods("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.Pods("").Watch(ctx, o)
			}),
		Nodes: informer(core, &corev1.Node{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return core.Nodes().List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.Nodes().Watch(ctx, o)
			}),
		Quotas: informer(core, &corev1.ResourceQuota{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return core.ResourceQuotas("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.ResourceQuotas("").Watch(ctx, o)
			}),
	}
	if claims != nil {
		s.Claims = informer(claims, &resourceapi.ResourceClaim{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return claims.ResourceClaims("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return claims.ResourceClaims("").Watch(ctx, o)
			})
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

func (s *Informers) all() []toolscache.SharedIndexInformer {
	all := []toolscache.SharedIndexInformer{s.Pods, s.Nodes, s.Quotas}
	if s.Claims != nil {
		all = append(all, s.Claims)
	}
	return all
}

// Start runs every informer until ctx ends; stop waits for them.
func (s *Informers) Start(ctx context.Context) {
	for _, inf := range s.all() {
		s.wg.Go(func() { inf.RunWithContext(ctx) })
	}
}

// Sync waits for every informer's first list, or for ctx.
func (s *Informers) Sync(ctx context.Context) error {
	for name, inf := range map[string]toolscache.SharedIndexInformer{"pods": s.Pods, "nodes": s.Nodes, "resourcequotas": s.Quotas} {
		if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("sync %s informer: %w", name, ctx.Err())
		}
	}
	// Claims only count in quota: a leader whose token may not list
	// them (a ClusterRole older than the binary) still serves, and counts
	// them once they sync (ClaimsSynced).
	if s.Claims != nil {
		wait, cancel := context.WithTimeout(ctx, claimsSyncWait)
		defer cancel()
		toolscache.WaitForCacheSync(wait.Done(), s.Claims.HasSynced)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sync resourceclaims informer: %w", err)
		}
	}
	return nil
}

// claimsSyncWait is how long Sync waits for the claims' first list.
const claimsSyncWait = 30 * time.Second

// ClaimsSynced says whether the claims' informer has its first list (true
// where there is none).
func (s *Informers) ClaimsSynced() bool { return s.Claims == nil || s.Claims.HasSynced() }

// Stop waits until every informer started has returned.
func (s *Informers) Stop() { s.wg.Wait() }
