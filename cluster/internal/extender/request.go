// Package extender serves kube-scheduler's extender verbs over HTTP on
// top of the pure core: it reads the pod, asks the cache for each node's
// GPUs and lets core decide.
package extender

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Defaults are the cluster-wide policies a pod's annotations may override.
type Defaults struct {
	NodePolicy string
	GPUPolicy  string
	Options    fit.Options
}

// Policy holds the Defaults in force, which the leader changes while it
// leads when the cluster settings file does (cluster.SettingsFile). Each
// call reads them once, so one filter or bind never mixes two.
type Policy struct{ d atomic.Pointer[Defaults] }

// NewPolicy returns a Policy holding d.
func NewPolicy(d Defaults) *Policy {
	p := &Policy{}
	p.Set(d)
	return p
}

// Get returns the Defaults in force.
func (p *Policy) Get() Defaults { return *p.d.Load() }

// Set puts d in force for the calls that start from now on.
func (p *Policy) Set(d Defaults) { p.d.Store(&d) }

// requestFor reads a pod into a fit.Request; the error names what to fix.
func requestFor(pod *slimpod.Pod, d Defaults) (fit.Request, string, error) {
	if pod.Invalid != nil {
		return fit.Request{}, "", pod.Invalid
	}
	a := pod.Annotations
	sel, err := podmodel.SelectorsOf(a)
	if err != nil {
		return fit.Request{}, "", err
	}
	req := fit.Request{
		Containers: pod.Containers,
		UseTypes:   sel.UseTypes,
		NoUseTypes: sel.NoUseTypes,
		UseUUIDs:   sel.UseUUIDs,
		NoUseUUIDs: sel.NoUseUUIDs,
	}
	if req.GPUPolicy, err = podmodel.GPUPolicyOf(a, d.GPUPolicy); err != nil {
		return fit.Request{}, "", err
	}
	if req.Mode, err = podmodel.ModeOf(a, req.Containers); err != nil {
		return fit.Request{}, "", err
	}
	if err := podmodel.CheckMode(req.Mode, req.Containers); err != nil {
		return fit.Request{}, "", err
	}
	nodePolicy, err := policy(a, d.NodePolicy, wellknown.AnnotationNodePolicy, wellknown.AnnotationNodePolicyHAMi)
	if err != nil {
		return fit.Request{}, "", err
	}
	if v, ok := a[wellknown.AnnotationNUMABind]; ok {
		// HAMi reads any value but true as false; a typo here would
		// silently spread a container over NUMA nodes, so it is refused.
		if req.SingleNUMA, err = strconv.ParseBool(strings.TrimSpace(v)); err != nil {
			return fit.Request{}, "", fmt.Errorf("annotation %s=%q: want true or false", wellknown.AnnotationNUMABind, v)
		}
	}
	return req, nodePolicy, nil
}

// policy reads vgpud's node policy annotation, else HAMi's, else the
// default. It is one name: HAMi's node policy has no chain either.
func policy(a map[string]string, def string, keys ...string) (string, error) {
	for _, k := range keys {
		v, ok := a[k]
		if !ok {
			continue
		}
		switch v = strings.ToLower(strings.TrimSpace(v)); v {
		case podmodel.Binpack, podmodel.Spread:
			return v, nil
		}
		return "", fmt.Errorf("annotation %s=%.64q: want %s or %s", k, a[k], podmodel.Binpack, podmodel.Spread)
	}
	return def, nil
}
