package quota

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/tools/cache"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// inflightFor is how long a claim admitted but not yet in the informer
// is charged from its admission: the informer shows it within a second,
// and one that another admission step refused never comes.
const inflightFor = 30 * time.Second

// claimSource is the namespaces' DRA claims, charged as pods asking the
// same would be (dradevices.ClaimRequests): from creation to deletion,
// allocated or not, as ResourceQuota counts them. Claims the webhook
// admitted count at once, before the informer has them, so that claims
// created together cannot each fit the same room.
type claimSource struct {
	indexer  cache.Indexer
	class    string
	wholeGPU func() int64
	bound    ClaimDeps
	now      func() time.Time

	mu       sync.Mutex            // admitted's alone
	admitted map[string][]admitted // by namespace
}

// ClaimDeps are what a claim's admission is checked with beside the
// claims: what the namespace's pods are charged as bind charges them
// (the books, with what their GPUs hold beyond), and the namespace's
// quota lock, which bind holds too, so that a claim and a pod never take
// the same room; Lock gives up with ctx's error once ctx ends.
type ClaimDeps struct {
	Pods func(namespace string) (podmodel.Usage, error)
	Lock func(ctx context.Context, namespace string) (unlock func(), err error)
	// Allocated is what a claim's allocation is charged on the GPUs the
	// leader knows, as bind charges a pod's placement (a slot's share at
	// least, a MIG instance whole); false where it knows none of them.
	// Nil: the allocation's consumed capacity alone.
	Allocated func(cl *resourceapi.ResourceClaim) (podmodel.Usage, bool)
}

// admitted is a claim admitted and not yet seen: its name, or the
// generateName its name will start with.
type admitted struct {
	name, generateName string
	charge             podmodel.Usage
	at                 time.Time
}

// CountClaims adds to the usage the claims of claimInformer (indexed by
// namespace) that ask DeviceClass class, a GPU held whole counting
// wholeGPU MiB (the smallest the leader knows), as the webhook charges a
// pod at create.
func (s *Source) CountClaims(claimInformer cache.SharedIndexInformer, class string, wholeGPU func() int64, deps ClaimDeps) error {
	c := &claimSource{indexer: claimInformer.GetIndexer(), class: class, wholeGPU: wholeGPU, bound: deps, now: time.Now, admitted: map[string][]admitted{}}
	if _, err := claimInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: c.seen}); err != nil {
		return err
	}
	s.claims = c
	return nil
}

// ClaimClass is the DeviceClass whose claims are charged ("" where none
// are).
func (s *Source) ClaimClass() string {
	if s.claims == nil {
		return ""
	}
	return s.claims.class
}

// AdmitClaim charges a claim being created in namespace (named name, or
// by generateName) at ask, unless refuse, given the namespace's quota
// and what its pods and claims are charged, says why not; record false
// (a dry run) charges nothing. It holds the namespace's quota lock, and
// refuses the claim where that does not come before ctx ends: admitted
// unchecked (the webhook's timeout, failurePolicy Ignore), it could
// take room a bind is giving a pod.
func (s *Source) AdmitClaim(ctx context.Context, namespace, name, generateName string, ask podmodel.Usage, record bool, refuse func(podmodel.Quota) string) string {
	c := s.claims
	if c == nil {
		return ""
	}
	unlock, err := c.bound.Lock(ctx, namespace)
	if err != nil {
		return fmt.Sprintf("vgpud could not check this claim against namespace %s's vGPU quota in time (%v): a bind there holds it; create the claim again", namespace, err)
	}
	defer unlock()
	quotas, err := s.quotas.ResourceQuotas(namespace).List(labels.Everything())
	if err != nil {
		return ""
	}
	q := s.limits(quotas)
	if q.Memory.Set || q.Cores.Set {
		pods, err := c.bound.Pods(namespace)
		if err != nil {
			return err.Error()
		}
		claims := c.usage(namespace)
		q.Memory.Used, q.Cores.Used = pods.MemMiB+claims.MemMiB, int64(pods.Cores+claims.Cores)
	}
	if msg := refuse(q); msg != "" || !record {
		return msg
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.admitted[namespace] = append(c.admitted[namespace], admitted{name: name, generateName: generateName, charge: ask, at: c.now()})
	return ""
}

// seen drops the admission of a claim the informer now has.
func (c *claimSource) seen(obj any) {
	cl, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.admitted[cl.Namespace]
	for i, a := range list {
		if a.name == cl.Name || (a.name == "" && a.generateName != "" && strings.HasPrefix(cl.Name, a.generateName)) {
			c.admitted[cl.Namespace] = append(list[:i:i], list[i+1:]...)
			return
		}
	}
}

// usage is what namespace's claims are charged, admitted ones included;
// nothing where claims are not counted. c.mu covers the admissions
// alone: the claims are summed outside it.
func (c *claimSource) usage(namespace string) podmodel.Usage {
	if c == nil {
		return podmodel.Usage{}
	}
	var u podmodel.Usage
	if objs, err := c.indexer.ByIndex(cache.NamespaceIndex, namespace); err == nil {
		claims := make([]*resourceapi.ResourceClaim, 0, len(objs))
		for _, o := range objs {
			if cl, ok := o.(*resourceapi.ResourceClaim); ok {
				claims = append(claims, cl)
			}
		}
		u = ClaimsUsage(claims, c.class, c.wholeGPU(), c.bound.Allocated)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return u.Plus(c.pending(namespace))
}

// pending is the charge of namespace's claims admitted and not yet seen,
// forgetting those past inflightFor; c.mu held.
func (c *claimSource) pending(namespace string) podmodel.Usage {
	var u podmodel.Usage
	live := c.admitted[namespace][:0]
	for _, a := range c.admitted[namespace] {
		if c.now().Sub(a.at) < inflightFor {
			live = append(live, a)
			u = u.Plus(a.charge)
		}
	}
	if len(live) == 0 {
		delete(c.admitted, namespace)
	} else {
		c.admitted[namespace] = live
	}
	return u
}

// ClaimsUsage is the pure part: the sum of claims' charges. Each is
// charged the larger of what it asks of class (dradevices.ClaimRequests)
// and, once allocated, what it holds of vgpud's devices (its status,
// which only kube-scheduler writes): the defaults its request left out,
// and shares reached through another DeviceClass (a MIG instance
// among them), count too. What it holds is allocated's charge where
// that knows its GPUs (a slot's share at least, as bind charges a pod),
// else its consumed capacity. A claim whose requests cannot be read
// counts what it was allocated.
func ClaimsUsage(claims []*resourceapi.ResourceClaim, class string, wholeGPU int64, allocated func(*resourceapi.ResourceClaim) (podmodel.Usage, bool)) podmodel.Usage {
	var u podmodel.Usage
	for _, cl := range claims {
		var asked podmodel.Usage
		if cs, err := dradevices.ClaimRequests(&cl.Spec, class); err == nil && len(cs) > 0 {
			asked = podmodel.Requested(cs, wholeGPU, false)
		}
		held, ok := podmodel.Usage{}, false
		if allocated != nil {
			held, ok = allocated(cl)
		}
		if !ok {
			held = consumed(cl)
		}
		u = u.Plus(asked.Max(held))
	}
	return u
}

// consumed is what cl's allocation takes of vgpud's shared GPUs: their
// consumed memory (whole MiB, rounded up) and cores, and a slot each. A
// device held whole (a MIG instance) consumes no capacity and is not
// counted here.
func consumed(cl *resourceapi.ResourceClaim) podmodel.Usage {
	var u podmodel.Usage
	if cl.Status.Allocation == nil {
		return u
	}
	for _, r := range cl.Status.Allocation.Devices.Results {
		if mem, cores, ok := dradevices.Consumed(r); ok && r.Driver == dradevices.DriverName {
			u.MemMiB += mem
			u.Cores += cores
			u.Slots++
		}
	}
	return u
}
