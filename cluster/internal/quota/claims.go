package quota

import (
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/tools/cache"

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
	now      func() time.Time

	mu       sync.Mutex
	admitted map[string][]admitted // by namespace
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
func (s *Source) CountClaims(claimInformer cache.SharedIndexInformer, class string, wholeGPU func() int64) error {
	c := &claimSource{indexer: claimInformer.GetIndexer(), class: class, wholeGPU: wholeGPU, now: time.Now, admitted: map[string][]admitted{}}
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
// with every claim already admitted, says why not. Admissions of a
// namespace are serialised.
func (s *Source) AdmitClaim(namespace, name, generateName string, ask podmodel.Usage, refuse func(podmodel.Quota) string) string {
	c := s.claims
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if msg := refuse(s.namespaceQuota(namespace, c.usageLocked)); msg != "" {
		return msg
	}
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
// nothing where claims are not counted.
func (c *claimSource) usage(namespace string) podmodel.Usage {
	if c == nil {
		return podmodel.Usage{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.usageLocked(namespace)
}

// usageLocked is usage, c.mu held.
func (c *claimSource) usageLocked(namespace string) podmodel.Usage {
	var u podmodel.Usage
	if objs, err := c.indexer.ByIndex(cache.NamespaceIndex, namespace); err == nil {
		claims := make([]*resourceapi.ResourceClaim, 0, len(objs))
		for _, o := range objs {
			if cl, ok := o.(*resourceapi.ResourceClaim); ok {
				claims = append(claims, cl)
			}
		}
		u = ClaimsUsage(claims, c.class, c.wholeGPU())
	}
	return u.Plus(c.pending(namespace))
}

// pending is the charge of namespace's claims admitted and not yet seen,
// forgetting those past inflightFor.
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

// ClaimsUsage is the pure part: the sum of claims' charges. A claim that
// cannot be read (the webhook refuses it where a quota is set) counts
// nothing.
func ClaimsUsage(claims []*resourceapi.ResourceClaim, class string, wholeGPU int64) podmodel.Usage {
	var u podmodel.Usage
	for _, cl := range claims {
		cs, err := dradevices.ClaimRequests(&cl.Spec, class)
		if err != nil || len(cs) == 0 {
			continue
		}
		u = u.Plus(podmodel.Requested(cs, wholeGPU, false))
	}
	return u
}
