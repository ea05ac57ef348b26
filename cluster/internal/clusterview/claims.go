package clusterview

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/vgpud/vgpud/cluster/internal/quota"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/inspectv1"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// WithClaims adds DRA claims to v: each share kube-scheduler allocated
// on a vgpud GPU to that GPU's row (memory, cores and a slot, as the
// claim consumes them), and each claim of class to its namespace's
// charge, by the leader's quota rule (quota.ClaimsUsage).
func WithClaims(v inspectv1.ClusterView, claims []resourceapi.ResourceClaim, class string) inspectv1.ClusterView {
	// A claim on a node the view does not show (--node) is none of its.
	shown := map[string]bool{}
	for _, n := range v.Nodes {
		shown[n.Name] = true
	}
	byNS := map[string][]*resourceapi.ResourceClaim{}
	for i := range claims {
		c := &claims[i]
		byNS[c.Namespace] = append(byNS[c.Namespace], c)
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != dradevices.DriverName || !shown[r.Pool] {
				continue
			}
			if !share(v.Nodes, r, c.Namespace+"/"+c.Name) {
				v.Problems = append(v.Problems, fmt.Sprintf("claim %s/%s: device %s of pool %s is none of the GPUs its node publishes in vgpud.io/gpus", c.Namespace, c.Name, r.Device, r.Pool))
			}
		}
	}
	smallest := smallestGPU(v.Nodes)
	for ns, cs := range byNS {
		u := quota.ClaimsUsage(cs, class, smallest, func(cl *resourceapi.ResourceClaim) (podmodel.Usage, bool) {
			if cl.Status.Allocation == nil {
				return podmodel.Usage{}, false
			}
			return dradevices.Charge(cl.Status.Allocation.Devices.Results, booked(v.Nodes))
		})
		if u.MemMiB == 0 && u.Cores == 0 {
			continue
		}
		i := slices.IndexFunc(v.Namespaces, func(n inspectv1.Namespace) bool { return n.Name == ns })
		if i < 0 {
			v.Namespaces = append(v.Namespaces, inspectv1.Namespace{Name: ns})
			i = len(v.Namespaces) - 1
		}
		v.Namespaces[i].MemoryUsedMiB += u.MemMiB
		v.Namespaces[i].CoresUsed += u.Cores
	}
	slices.SortFunc(v.Namespaces, func(a, b inspectv1.Namespace) int { return strings.Compare(a.Name, b.Name) })
	return v
}

// booked finds a claim's device among nodes' GPUs as the leader's books
// do: a node's pool is named after the node, a device after the GPU's
// (or MIG instance's) UUID, and a GPU's slots are its split.
func booked(nodes []inspectv1.NodeView) func(pool, device string) (protocol.GPU, bool, bool) {
	return func(pool, device string) (protocol.GPU, bool, bool) {
		for _, n := range nodes {
			if n.Name != pool {
				continue
			}
			for _, g := range n.GPUs {
				if dradevices.DeviceName(g.UUID) == device {
					return protocol.GPU{UUID: g.UUID, MemoryMiB: g.MemoryMiB, Cores: g.Cores, Split: g.Slots}, strings.HasPrefix(g.UUID, "MIG-"), true
				}
			}
		}
		return protocol.GPU{}, false, false
	}
}

// share adds one allocated share to the GPU it names: a node's pool is
// named after the node, a device after the GPU's UUID.
func share(nodes []inspectv1.NodeView, r resourceapi.DeviceRequestAllocationResult, claim string) bool {
	for i := range nodes {
		if nodes[i].Name != r.Pool {
			continue
		}
		for j := range nodes[i].GPUs {
			g := &nodes[i].GPUs[j]
			if dradevices.DeviceName(g.UUID) != r.Device {
				continue
			}
			if mem, cores, ok := dradevices.Consumed(r); ok {
				g.MemoryUsedMiB += mem
				g.CoresUsed += cores
			} else {
				// Held whole (a MIG instance), or by a scheduler that
				// does not record what a share consumes.
				g.MemoryUsedMiB, g.CoresUsed = g.MemoryMiB, g.Cores
			}
			g.SlotsUsed++
			if !slices.Contains(g.Claims, claim) {
				g.Claims = append(g.Claims, claim)
			}
			return true
		}
	}
	return false
}

// smallestGPU is the least memory of any GPU in v, what a claim held
// whole is charged at (as the leader's books.SmallestGPUMiB).
func smallestGPU(nodes []inspectv1.NodeView) int64 {
	var least int64
	for _, n := range nodes {
		for _, g := range n.GPUs {
			if least == 0 || (g.MemoryMiB > 0 && g.MemoryMiB < least) {
				least = g.MemoryMiB
			}
		}
	}
	return least
}
