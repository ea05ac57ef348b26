package dra

import (
	"context"
	"fmt"
	"maps"
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
// A share of a GPU is one container's (hold).
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
	g = prep.Grants[at]
	switch {
	case g.Share:
		err = p.hold(ctx, uid, prep, g.CDI, holder{pod: podUID, container: container})
	case !slices.Contains(prep.Pods, podUID):
		err = p.join(ctx, uid, prep, podUID)
	}
	if err != nil {
		return Grant{}, true, fmt.Errorf("CDI device %s: %w", cdiName, err)
	}
	return g, true, nil
}

// holder is the one container a share of a GPU serves.
type holder struct{ pod, container string }

func (h holder) String() string { return h.pod + "/" + h.container }

func parseHolder(s string) holder {
	pod, container, _ := strings.Cut(s, "/")
	return holder{pod, container}
}

// hold gives a share's device (cdi) to who, the one container it
// serves: each container is held to its slice apart, so a second one,
// of this pod or another, would hold the share twice, whatever pod
// claim entries led there. The first container of a pod the claim was
// prepared for takes it, and keeps it across restarts. A pod that
// replaced the holder's takes it over once the claim, read again, is
// reserved for it and no longer for any pod the node prepared it for
// (the claim controller drops a pod only once it has ended).
func (p *Preparer) hold(ctx context.Context, uid string, prep Prepared, cdi string, who holder) error {
	held, has := prep.Holders[cdi]
	current := parseHolder(held)
	switch {
	case has && current == who:
		return nil
	case has && current.pod == who.pod:
		return fmt.Errorf("claim %s/%s holds a share of a GPU, which serves one container, and container %q of this pod has it: give each container a claim of its own", prep.Namespace, prep.Name, current.container)
	case !has && slices.Contains(prep.Pods, who.pod):
		return p.setHolder(uid, cdi, who, nil)
	}
	if p.getClaim == nil {
		return onePod(prep.Namespace, prep.Name, len(prep.Pods)+1)
	}
	c, err := p.getClaim(ctx, prep.Namespace, prep.Name)
	if err != nil {
		return fmt.Errorf("claim %s/%s: reading it again failed: %w", prep.Namespace, prep.Name, err)
	}
	reserved := func(pod string) bool {
		return slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool {
			return r.APIGroup == "" && r.Resource == "pods" && string(r.UID) == pod
		})
	}
	if string(c.UID) != uid || !reserved(who.pod) {
		return fmt.Errorf("claim %s/%s is not reserved for pod %s", prep.Namespace, prep.Name, who.pod)
	}
	if slices.ContainsFunc(prep.Pods, func(pod string) bool { return pod != who.pod && reserved(pod) }) {
		return onePod(prep.Namespace, prep.Name, len(prep.Pods)+1)
	}
	return p.setHolder(uid, cdi, who, []string{who.pod})
}

// setHolder records who holds cdi of claim uid, and, where pods is not
// nil, the claim's pods as those.
func (p *Preparer) setHolder(uid, cdi string, who holder, pods []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur, ok := p.claims[uid]
	if !ok {
		return fmt.Errorf("claim %s was unprepared meanwhile", uid)
	}
	next := *cur
	next.Holders = maps.Clone(cur.Holders)
	if next.Holders == nil {
		next.Holders = map[string]string{}
	}
	next.Holders[cdi] = who.String()
	if pods != nil {
		next.Pods = pods
	}
	p.claims[uid] = &next
	if err := p.save(); err != nil {
		p.claims[uid] = cur
		return err
	}
	return nil
}

// join adds pod to the pods of claim uid where the claim, read again,
// is the one prepared and reserved for it.
func (p *Preparer) join(ctx context.Context, uid string, prep Prepared, pod string) error {
	if p.getClaim == nil {
		return fmt.Errorf("claim %s/%s was not prepared for pod %s", prep.Namespace, prep.Name, pod)
	}
	c, err := p.getClaim(ctx, prep.Namespace, prep.Name)
	if err != nil {
		return fmt.Errorf("claim %s/%s was prepared for other pods, and reading it again failed: %w", prep.Namespace, prep.Name, err)
	}
	reserved := slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool {
		return r.APIGroup == "" && r.Resource == "pods" && string(r.UID) == pod
	})
	if string(c.UID) != uid || !reserved {
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
	next.Pods = append(slices.Clone(cur.Pods), pod)
	slices.Sort(next.Pods)
	p.claims[uid] = &next
	if err := p.save(); err != nil {
		p.claims[uid] = cur
		return err
	}
	return nil
}
