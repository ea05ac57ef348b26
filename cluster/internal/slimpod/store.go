package slimpod

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Store reads records from a pod informer whose transform is Of (see
// cache.Transform). client-go's typed pod Lister cannot: it
// expects *corev1.Pod.
type Store struct {
	indexer cache.Indexer
}

// NewStore reads inf's store; inf must be indexed by namespace
// (cache.NamespaceIndex).
func NewStore(inf cache.SharedIndexInformer) Store { return Store{indexer: inf.GetIndexer()} }

// Get returns the pod namespace/name, or nil if the informer has none.
func (s Store) Get(namespace, name string) *Pod {
	obj, ok, err := s.indexer.GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	p, _ := obj.(*Pod)
	return p
}

// List returns the namespace's pods.
func (s Store) List(namespace string) []*Pod {
	objs, err := s.indexer.ByIndex(cache.NamespaceIndex, namespace)
	if err != nil {
		return nil
	}
	out := make([]*Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

// Transform is an informer transform that turns pods into records (Of)
// and passes everything else, records included, through unchanged.
func Transform(names wellknown.ResourceNames) cache.TransformFunc {
	return func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			return Of(p, names), nil
		}
		return obj, nil
	}
}
