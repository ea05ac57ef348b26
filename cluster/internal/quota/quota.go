// Package quota answers "how much vGPU quota does this namespace have, and
// how much is used" from informer caches, so an admission never lists pods
// from the API, and says whether a pod's ask fits (Check).
package quota

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Source reads quotas and pods from shared informers, and DRA claims
// where CountClaims was given theirs.
type Source struct {
	pods   slimpod.Store
	quotas corelisters.ResourceQuotaLister
	names  wellknown.ResourceNames
	claims *claimSource
}

// New reads pods from podInformer, whose transform must be
// slimpod.Transform, and quotas from quotaInformer; both must be indexed by
// namespace. Start them and wait for their sync before trusting the
// answers.
func New(podInformer, quotaInformer cache.SharedIndexInformer, names wellknown.ResourceNames) *Source {
	return &Source{
		pods:   slimpod.NewStore(podInformer),
		quotas: corelisters.NewResourceQuotaLister(quotaInformer.GetIndexer()),
		names:  names,
	}
}

// NamespaceQuota sums the namespace's live pods against its hard limits.
// A pod whose resources cannot be read counts as nothing: the webhook
// would have denied it, so it can only be one admitted before vgpud was.
func (s *Source) NamespaceQuota(namespace string) podmodel.Quota {
	quotas, err := s.quotas.ResourceQuotas(namespace).List(labels.Everything())
	if err != nil || len(quotas) == 0 {
		return podmodel.Quota{}
	}
	q := Compute(s.pods.List(namespace), quotas, s.names)
	if q.Memory.Set || q.Cores.Set {
		u := s.claims.usage(namespace)
		q.Memory.Used += u.MemMiB
		q.Cores.Used += int64(u.Cores)
	}
	return q
}

// NamespaceLimits is the namespace's hard limits, with what its DRA
// claims are charged as Used: bind adds the pods' usage from its own
// books, which hold no claim.
func (s *Source) NamespaceLimits(namespace string) podmodel.Quota {
	quotas, err := s.quotas.ResourceQuotas(namespace).List(labels.Everything())
	if err != nil {
		return podmodel.Quota{}
	}
	q := s.limits(quotas)
	if q.Memory.Set || q.Cores.Set {
		u := s.claims.usage(namespace)
		q.Memory.Used, q.Cores.Used = u.MemMiB, int64(u.Cores)
	}
	return q
}

// limits is the tightest hard vGPU limits of a namespace's quotas.
func (s *Source) limits(quotas []*corev1.ResourceQuota) podmodel.Quota {
	return podmodel.Quota{Memory: hardLimit(quotas, s.names.GPUMem), Cores: hardLimit(quotas, s.names.GPUCores)}
}

// AllLimits is every namespace's hard vGPU limits, for those that set
// one.
func (s *Source) AllLimits() map[string]podmodel.Quota {
	quotas, err := s.quotas.List(labels.Everything())
	if err != nil {
		return nil
	}
	byNS := map[string][]*corev1.ResourceQuota{}
	for _, q := range quotas {
		byNS[q.Namespace] = append(byNS[q.Namespace], q)
	}
	out := map[string]podmodel.Quota{}
	for ns, qs := range byNS {
		q := s.limits(qs)
		if q.Memory.Set || q.Cores.Set {
			out[ns] = q
		}
	}
	return out
}

// Compute is the pure part: the tightest hard limit over all quotas, and
// the usage of the pods that are not terminated.
func Compute(live []*slimpod.Pod, quotas []*corev1.ResourceQuota, names wellknown.ResourceNames) podmodel.Quota {
	var q podmodel.Quota
	q.Memory = hardLimit(quotas, names.GPUMem)
	q.Cores = hardLimit(quotas, names.GPUCores)
	if !q.Memory.Set && !q.Cores.Set {
		return q
	}
	for _, p := range live {
		if p.Terminated() || !p.Wants {
			continue
		}
		u, err := p.Usage()
		if err != nil {
			continue
		}
		q.Memory.Used += u.MemMiB
		q.Cores.Used += int64(u.Cores)
	}
	return q
}

// hardLimit reads name in any form ResourceQuota accepts for an extended
// resource (bare, requests., limits.) and keeps the smallest.
func hardLimit(quotas []*corev1.ResourceQuota, name string) podmodel.Limit {
	var l podmodel.Limit
	for _, rq := range quotas {
		for _, key := range []string{name, "requests." + name, "limits." + name} {
			v, ok := rq.Spec.Hard[corev1.ResourceName(key)]
			if !ok {
				continue
			}
			if n := v.Value(); !l.Set || n < l.Hard {
				l = podmodel.Limit{Set: true, Hard: n}
			}
		}
	}
	return l
}
