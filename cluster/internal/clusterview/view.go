// Package clusterview is `vgpud inspect --cluster`: the cluster as vgpud
// books it, read from the API by anyone with a kubeconfig. Per node and
// GPU what is held and free and by which pods, per namespace the quota
// charged and left: the figures the leader works from, rebuilt here
// from the same annotations with the same rules (podmodel).
package clusterview

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/cluster/internal/books"
	"github.com/vgpud/vgpud/cluster/internal/quota"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/hamirecord"
	"github.com/vgpud/vgpud/protocol/inspectv1"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Build reads the view from the API's nodes, pods and quotas; scheduler
// is vgpud's kube-scheduler profile, whose pods alone carry bookings.
func Build(nodes []corev1.Node, pods []corev1.Pod, quotas []corev1.ResourceQuota, scheduler string, names wellknown.ResourceNames, now time.Time) inspectv1.ClusterView {
	v := inspectv1.ClusterView{APIVersion: inspectv1.ClusterVersion, At: now}
	at := map[string]*inspectv1.NodeView{}     // by name
	inventories := map[string][]protocol.GPU{} // as the books hold them: MIG instances too
	migs := map[string]map[string]*protocol.MIGRef{}
	for _, n := range nodes {
		raw, ok := n.Annotations[wellknown.AnnotationGPUs]
		if !ok {
			continue
		}
		inv, err := protocol.DecodeInventory(raw)
		if err != nil {
			v.Problems = append(v.Problems, fmt.Sprintf("node %s: %s: %v", n.Name, wellknown.AnnotationGPUs, err))
			continue
		}
		gpus, mig := inv.Bookable()
		inventories[n.Name], migs[n.Name] = gpus, mig
		node := inspectv1.NodeView{Name: n.Name, Identity: n.Annotations[wellknown.AnnotationIdentity], Plugin: n.Annotations[wellknown.AnnotationPlugin]}
		if raw, ok := n.Annotations[wellknown.AnnotationUsage]; ok {
			if u, err := protocol.DecodeUsage(raw); err != nil {
				v.Problems = append(v.Problems, fmt.Sprintf("node %s: %s: %v; the leader counts nothing held there beyond bookings", n.Name, wellknown.AnnotationUsage, err))
			} else {
				node.Use = &u
			}
		}
		if raw, ok := n.Annotations[wellknown.AnnotationRuntime]; ok {
			if c, err := decodeRuntimeCheck(raw); err != nil {
				v.Problems = append(v.Problems, fmt.Sprintf("node %s: %s: %v", n.Name, wellknown.AnnotationRuntime, err))
			} else {
				node.Runtime = &c
			}
		}
		cordon, err := protocol.NodeCordon(n.Annotations)
		if err != nil {
			v.Problems = append(v.Problems, fmt.Sprintf("node %s: %v; the leader places nothing there until it reads", n.Name, err))
		}
		cordoned, unknown := cordon.Resolve(gpus, mig)
		if len(unknown) > 0 {
			v.Problems = append(v.Problems, fmt.Sprintf("node %s: its cordon names %s, which the node does not have", n.Name, strings.Join(unknown, ", ")))
		}
		var held map[string]protocol.GPUHeld // as the leader reads it: a MIG instance holds none
		if node.Use != nil {
			held = books.Held(*node.Use)
		}
		for i, g := range gpus {
			row := inspectv1.GPUBooking{Index: g.Index, UUID: g.UUID, Model: g.Model, Healthy: g.Healthy, Cordoned: cordoned[i], MemoryMiB: g.MemoryMiB, Cores: g.Cores, Slots: g.Split}
			if h, ok := held[g.UUID]; ok && mig[g.UUID] == nil {
				row.HeldMiB, row.Full = h.MiB, h.Full
			}
			node.GPUs = append(node.GPUs, row)
		}
		v.Nodes = append(v.Nodes, node)
	}
	for i := range v.Nodes {
		at[v.Nodes[i].Name] = &v.Nodes[i]
	}
	charged := map[string]*inspectv1.Namespace{}
	for i := range pods {
		p := &pods[i]
		if podmodel.Terminated(p) {
			continue
		}
		a, booked, err := bookable(p, scheduler, inventories, migs)
		if err != nil {
			v.Problems = append(v.Problems, fmt.Sprintf("pod %s/%s: %v", p.Namespace, p.Name, err))
		}
		if !booked {
			continue
		}
		if _, ours := p.Annotations[wellknown.AnnotationAssignment]; !ours {
			v.HAMi = append(v.HAMi, hamiRecord(p, a))
		}
		pl := podmodel.PlacementOf(a, podmodel.Kinds(&p.Spec))
		node := at[a.Node]
		onNode := func(string) (protocol.GPU, bool) { return protocol.GPU{}, false }
		if node != nil {
			hold(node, p.Namespace+"/"+p.Name, pl)
			onNode = func(uuid string) (protocol.GPU, bool) { return gpuOf(node, uuid) }
			for _, uuid := range books.Gone(a, inventories[a.Node]) {
				v.Problems = append(v.Problems, fmt.Sprintf("pod %s/%s: its GPU %s is gone from node %s (removed, or fallen off the bus); the pod runs on without it, its other GPUs stay booked, and nothing is placed on it: delete the pod", p.Namespace, p.Name, uuid, a.Node))
			}
		}
		ns := charged[p.Namespace]
		if ns == nil {
			ns = &inspectv1.Namespace{Name: p.Namespace}
			charged[p.Namespace] = ns
		}
		c := pl.Charge(onNode)
		ns.MemoryUsedMiB += c.MemMiB
		ns.CoresUsed += c.Cores
	}
	byNS := map[string][]*corev1.ResourceQuota{}
	for i := range quotas {
		byNS[quotas[i].Namespace] = append(byNS[quotas[i].Namespace], &quotas[i])
	}
	for name, qs := range byNS {
		// The leader's own reading of the hard limits (cluster/quota).
		limits := quota.Compute(nil, qs, names)
		if !limits.Memory.Set && !limits.Cores.Set {
			continue
		}
		ns := charged[name]
		if ns == nil {
			ns = &inspectv1.Namespace{Name: name}
			charged[name] = ns
		}
		if limits.Memory.Set {
			ns.MemoryLimit = &limits.Memory.Hard
		}
		if limits.Cores.Set {
			ns.CoresLimit = &limits.Cores.Hard
		}
	}
	for _, ns := range charged {
		v.Namespaces = append(v.Namespaces, *ns)
	}
	// A MIG instance a node may make on demand, not made and held by no
	// pod, is one of many alternatives: no row.
	for i := range v.Nodes {
		refs := migs[v.Nodes[i].Name]
		v.Nodes[i].GPUs = slices.DeleteFunc(v.Nodes[i].GPUs, func(g inspectv1.GPUBooking) bool {
			r := refs[g.UUID]
			return r != nil && r.OnDemand && !r.Made && len(g.Pods) == 0
		})
	}
	slices.SortFunc(v.Nodes, func(a, b inspectv1.NodeView) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(v.Namespaces, func(a, b inspectv1.Namespace) int { return strings.Compare(a.Name, b.Name) })
	return v
}

// hold adds what pod's placement holds on n's GPUs.
func hold(n *inspectv1.NodeView, pod string, pl podmodel.Placement) {
	uuids := make([]string, len(n.GPUs))
	for i, g := range n.GPUs {
		uuids[i] = g.UUID
	}
	for i, u := range pl.Footprint(uuids) {
		if u.Slots == 0 {
			continue
		}
		g := &n.GPUs[i]
		g.MemoryUsedMiB += u.MemMiB
		g.CoresUsed += u.Cores
		g.SlotsUsed += u.Slots
		g.Exclusive = g.Exclusive || u.Exclusive
		g.Pods = append(g.Pods, pod)
	}
}

// gpuOf is a GPU of n as its inventory gave it, what a charge
// is figured from (podmodel.Placement.Charge).
func gpuOf(n *inspectv1.NodeView, uuid string) (protocol.GPU, bool) {
	for _, g := range n.GPUs {
		if g.UUID == uuid {
			return protocol.GPU{UUID: g.UUID, MemoryMiB: g.MemoryMiB, Cores: g.Cores, Split: g.Slots}, true
		}
	}
	return protocol.GPU{}, false
}

// hamiRecord is what the books hold of a pod HAMi placed.
func hamiRecord(p *corev1.Pod, a protocol.Assignment) inspectv1.HAMiRecord {
	r := inspectv1.HAMiRecord{Pod: p.Namespace + "/" + p.Name, Node: a.Node, Created: p.CreationTimestamp}
	for _, c := range a.Containers {
		for _, s := range c.GPUs {
			r.Slices = append(r.Slices, fmt.Sprintf("%s %d/%d%%", s.UUID, s.MemoryMiB, s.Cores))
		}
	}
	return r
}

// bookable is the assignment the leader's books hold for p, by their
// rules: vgpud's own, else HAMi's record of a pod it placed. booked is
// false for a pod with neither, or with one the books refuse (err says
// why).
func bookable(p *corev1.Pod, scheduler string, inventories map[string][]protocol.GPU, migs map[string]map[string]*protocol.MIGRef) (a protocol.Assignment, booked bool, err error) {
	if raw, ok := p.Annotations[wellknown.AnnotationAssignment]; ok {
		if a, err = protocol.DecodeAssignment(raw); err != nil {
			return a, false, fmt.Errorf("%s: %w", wellknown.AnnotationAssignment, err)
		}
		if err = books.Bookable(scheduler, p.Spec.SchedulerName, p.Spec.NodeName, a, inventories[a.Node]); err != nil {
			return a, false, err
		}
		return a, true, nil
	}
	raw := p.Annotations[hamirecord.AnnotationHAMiAllocated]
	if raw == "" {
		return a, false, nil
	}
	hamiNode := p.Annotations[hamirecord.AnnotationHAMiNode]
	a, err = books.BookableHAMi(p.Spec.NodeName, hamiNode, raw, inventories[p.Spec.NodeName], migs[p.Spec.NodeName])
	return a, err == nil, err
}

// decodeRuntimeCheck reads a node's vgpud.io/runtime-check as a terminal
// may show it: a known result, and no control characters in what a node
// (a compromised one, say) wrote.
func decodeRuntimeCheck(raw string) (protocol.RuntimeCheck, error) {
	var c protocol.RuntimeCheck
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return c, err
	}
	if results := []string{protocol.RuntimeFailsClosed, protocol.RuntimeFailsOpen, protocol.RuntimeUnknown}; !slices.Contains(results, c.Result) {
		return c, fmt.Errorf("result %q is none of %s", printable(c.Result), strings.Join(results, ", "))
	}
	c.Runtime = printable(c.Runtime)
	for i, p := range c.Problems {
		c.Problems[i] = printable(p)
	}
	return c, nil
}

// printable drops control characters.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
}
