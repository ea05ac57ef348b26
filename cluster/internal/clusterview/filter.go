package clusterview

import (
	"slices"
	"strings"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/inspectv1"
)

// Filter keeps what one namespace or one node shows ("" keeps all), as
// kubectl's -n narrows what it lists. A GPU's memory, cores and slices
// stay its whole node's booking: what is free there is free to the
// namespace too. With a namespace, a GPU is shown where one of its pods
// holds a slice, and only its pods and claims; the usage rows, HAMi records and
// problems are its own. With a node, the namespaces' charges are left
// out: a quota is charged by pods on every node.
func Filter(v inspectv1.ClusterView, namespace, node string) inspectv1.ClusterView {
	v.Namespace, v.Node = namespace, node
	if node != "" {
		v.Nodes = slices.DeleteFunc(slices.Clone(v.Nodes), func(n inspectv1.NodeView) bool { return n.Name != node })
		v.HAMi = slices.DeleteFunc(slices.Clone(v.HAMi), func(r inspectv1.HAMiRecord) bool { return r.Node != node })
		// A quota is the whole cluster's: one node's pods charge only
		// part of it.
		v.Namespaces = nil
	}
	if namespace == "" {
		return v
	}
	ours := func(pod string) bool { return strings.HasPrefix(pod, namespace+"/") }
	var nodes []inspectv1.NodeView
	for _, n := range v.Nodes {
		var gpus []inspectv1.GPUBooking
		for _, g := range n.GPUs {
			pods := slices.DeleteFunc(slices.Clone(g.Pods), func(p string) bool { return !ours(p) })
			claims := slices.DeleteFunc(slices.Clone(g.Claims), func(c string) bool { return !ours(c) })
			if len(pods)+len(claims) > 0 {
				g.Pods, g.Claims = pods, claims
				gpus = append(gpus, g)
			}
		}
		if n.Use != nil {
			use := *n.Use
			use.Containers = slices.DeleteFunc(slices.Clone(use.Containers), func(c protocol.ContainerUsage) bool { return c.Namespace != namespace })
			use.Unattributed, use.Omitted = nil, 0
			n.Use = &use
		}
		if len(gpus) > 0 {
			n.GPUs = gpus
			nodes = append(nodes, n)
		}
	}
	v.Nodes = nodes
	v.Namespaces = slices.DeleteFunc(slices.Clone(v.Namespaces), func(ns inspectv1.Namespace) bool { return ns.Name != namespace })
	v.HAMi = slices.DeleteFunc(slices.Clone(v.HAMi), func(r inspectv1.HAMiRecord) bool { return !ours(r.Pod) })
	v.Problems = slices.DeleteFunc(slices.Clone(v.Problems), func(p string) bool {
		return !strings.HasPrefix(p, "pod "+namespace+"/") && !strings.HasPrefix(p, "claim "+namespace+"/")
	})
	return v
}
