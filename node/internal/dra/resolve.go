package dra

import (
	"context"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// ClaimGetter reads a claim from the apiserver.
type ClaimGetter func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)

// Resolve is the grant behind a CDI device kubelet gave container of
// the pod with UID podUID; ours says whether the name is of the claims'
// kind at all. A name the node did not prepare, or prepared for other
// pods, is refused. A claim several pods share is prepared once, for the
// pods it was reserved for then, so a pod that joined since is looked up
// in the claim, read again, and added to the record where it is there.
// A share of a GPU may serve any number of containers of those pods:
// the node holds them to it together (usage.Share.Pool).
func (p *Preparer) Resolve(ctx context.Context, cdiName, podUID, container string) (g Grant, ours bool, err error) {
	name, ok := strings.CutPrefix(cdiName, ClaimKind+"=")
	if !ok {
		return Grant{}, false, nil
	}
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return Grant{}, true, fmt.Errorf("CDI device %s names no claim", cdiName)
	}
	uid := name[:i]
	p.mu.Lock()
	c, ok := p.claims[uid]
	var prep Prepared
	if ok {
		prep = *c
	}
	p.mu.Unlock()
	if !ok {
		return Grant{}, true, fmt.Errorf("CDI device %s: this node prepared no claim %s", cdiName, uid)
	}
	at := slices.IndexFunc(prep.Grants, func(g Grant) bool { return g.CDI == name })
	if at < 0 {
		return Grant{}, true, fmt.Errorf("CDI device %s: claim %s/%s has no such device", cdiName, prep.Namespace, prep.Name)
	}
	if !slices.Contains(prep.Pods, podUID) {
		p.mu.Lock()
		keepOnly := p.keepOnly
		p.mu.Unlock()
		if keepOnly {
			return Grant{}, true, fmt.Errorf("CDI device %s: claim %s/%s was prepared here for other pods, and node %s no longer serves claims (dra is off): it keeps the claim for those pods alone", cdiName, prep.Namespace, prep.Name, p.node)
		}
		if err := p.join(ctx, uid, prep, podUID); err != nil {
			return Grant{}, true, fmt.Errorf("CDI device %s: %w", cdiName, err)
		}
	}
	g = prep.Grants[at]
	g.Claim = prep.Namespace + "/" + prep.Name
	return g, true, nil
}

// join adds pod to the pods of claim uid where the claim, read again,
// is the one prepared and reserved for it; pods of prep (the record as
// it was before the read) it is no longer reserved for (they ended: the
// claim controller drops a pod only then) leave the record. A pod that
// joined meanwhile, which the read may predate, stays.
func (p *Preparer) join(ctx context.Context, uid string, prep Prepared, pod string) error {
	if p.getClaim == nil {
		return fmt.Errorf("claim %s/%s was not prepared for pod %s", prep.Namespace, prep.Name, pod)
	}
	c, err := p.getClaim(ctx, prep.Namespace, prep.Name)
	if err != nil {
		return fmt.Errorf("claim %s/%s was prepared for other pods, and reading it again failed: %w", prep.Namespace, prep.Name, err)
	}
	reserved := func(pod string) bool {
		return slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool {
			return r.APIGroup == "" && r.Resource == "pods" && string(r.UID) == pod
		})
	}
	if string(c.UID) != uid || !reserved(pod) {
		return fmt.Errorf("claim %s/%s is not reserved for pod %s", prep.Namespace, prep.Name, pod)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cur, ok := p.claims[uid]
	if !ok {
		return fmt.Errorf("claim %s/%s was unprepared meanwhile", prep.Namespace, prep.Name)
	}
	if slices.Contains(cur.Pods, pod) {
		return nil
	}
	next := *cur
	next.Pods = []string{pod}
	for _, other := range cur.Pods {
		if reserved(other) || !slices.Contains(prep.Pods, other) {
			next.Pods = append(next.Pods, other)
		}
	}
	slices.Sort(next.Pods)
	p.claims[uid] = &next
	if err := p.save(); err != nil {
		p.claims[uid] = cur
		return err
	}
	return nil
}
