// Package extender serves kube-scheduler's extender verbs over HTTP on
// top of the pure core: it reads the pod, asks the cache for each node's
// GPUs and lets core decide.
package extender

import (
	"fmt"
	"strings"

	"github.com/vgpud/vgpud/cluster/core"
	"github.com/vgpud/vgpud/cluster/pods"
	"github.com/vgpud/vgpud/protocol"
)

// Defaults are the cluster-wide policies a pod's annotations may override.
type Defaults struct {
	NodePolicy string
	GPUPolicy  string
	Options    core.Options
}

// requestFor reads a pod into a core.Request; the error names what to fix.
func requestFor(pod *pods.Pod, d Defaults) (core.Request, string, error) {
	if pod.Invalid != nil {
		return core.Request{}, "", pod.Invalid
	}
	a := pod.Annotations
	var err error
	req := core.Request{
		Containers: pod.Containers,
		UseTypes:   list(a[protocol.AnnotationUseGPUType]),
		NoUseTypes: list(a[protocol.AnnotationNoUseGPUType]),
		UseUUIDs:   list(a[protocol.AnnotationUseGPUUUID]),
		NoUseUUIDs: list(a[protocol.AnnotationNoUseGPUUUID]),
	}
	if req.GPUPolicy, err = policy(a, d.GPUPolicy, protocol.AnnotationGPUPolicy, protocol.AnnotationGPUPolicyHAMi); err != nil {
		return core.Request{}, "", err
	}
	nodePolicy, err := policy(a, d.NodePolicy, protocol.AnnotationNodePolicy, protocol.AnnotationNodePolicyHAMi)
	if err != nil {
		return core.Request{}, "", err
	}
	return req, nodePolicy, nil
}

// policy reads vgpud's annotation, else HAMi's, else the default.
func policy(a map[string]string, def string, keys ...string) (string, error) {
	for _, k := range keys {
		v, ok := a[k]
		if !ok {
			continue
		}
		switch v = strings.ToLower(strings.TrimSpace(v)); v {
		case core.Binpack, core.Spread:
			return v, nil
		}
		return "", fmt.Errorf("annotation %s=%q: want %s or %s", k, a[k], core.Binpack, core.Spread)
	}
	return def, nil
}

func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
