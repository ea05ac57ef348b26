package books

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// What the books hold of DRA claims: the shares kube-scheduler allocated
// on vgpud's devices, each in the pool named after its node, count on
// their GPUs as a pod's slices would. On a node that serves claims the
// extender places nothing anyway; on one moved back to the device
// plugin while claims' pods still run there, they keep the extender
// off what those pods hold. Only kube-scheduler writes an allocation:
// a tenant may not write a claim's status (docs/security.md).

// WatchClaims feeds the ledger from the claims informer, whose transform
// must be Transform. Start it afterwards. The returned func reports when
// the handler has seen the informer's initial list.
func (c *Ledger) WatchClaims(claimInformer cache.SharedIndexInformer) (func() bool, error) {
	set := func(obj any) {
		if cl, ok := obj.(*resourceapi.ResourceClaim); ok {
			c.SetClaim(cl)
		}
	}
	reg, err := claimInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if cl, ok := obj.(*resourceapi.ResourceClaim); ok {
				c.DeleteClaim(cl.UID)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return reg.HasSynced, nil
}

// SetClaim books what cl was allocated of vgpud's devices, by node, in
// place of what it held before.
func (c *Ledger) SetClaim(cl *resourceapi.ResourceClaim) {
	byNode := map[string][]resourceapi.DeviceRequestAllocationResult{}
	if a := cl.Status.Allocation; a != nil {
		for _, r := range a.Devices.Results {
			if r.Driver == dradevices.DriverName {
				byNode[r.Pool] = append(byNode[r.Pool], r)
			}
		}
	}
	c.mu.Lock()
	freed := c.setClaim(cl.UID, byNode)
	c.mu.Unlock()
	c.tellFreed(freed)
}

// DeleteClaim unbooks a claim that is gone.
func (c *Ledger) DeleteClaim(uid types.UID) {
	c.mu.Lock()
	freed := c.setClaim(uid, nil)
	c.mu.Unlock()
	c.tellFreed(freed)
}

// setClaim makes uid's allocations byNode, recounting the nodes that
// changed; it says whether a node lost some. c.mu held.
func (c *Ledger) setClaim(uid types.UID, byNode map[string][]resourceapi.DeviceRequestAllocationResult) (freed bool) {
	for _, name := range c.claimNodes[uid] {
		if _, still := byNode[name]; !still {
			delete(c.node(name).claims, uid)
			c.recompute(name)
			freed = true
		}
	}
	delete(c.claimNodes, uid)
	for name, rs := range byNode {
		st := c.node(name)
		if st.claims == nil {
			st.claims = map[types.UID][]resourceapi.DeviceRequestAllocationResult{}
		}
		if same(st.claims[uid], rs) {
			c.claimNodes[uid] = append(c.claimNodes[uid], name)
			continue
		}
		st.claims[uid] = rs
		c.claimNodes[uid] = append(c.claimNodes[uid], name)
		c.recompute(name)
	}
	return freed
}

// same says whether two allocations on one node are the same devices
// and shares.
func same(a, b []resourceapi.DeviceRequestAllocationResult) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		ma, ca, oka := dradevices.Consumed(a[i])
		mb, cb, okb := dradevices.Consumed(b[i])
		if a[i].Device != b[i].Device || ma != mb || ca != cb || oka != okb {
			return false
		}
	}
	return true
}

// addClaims adds to n, the node st's GPUs, what the claims allocated
// there hold: a share its consumed memory and cores, a device held
// whole (a MIG instance, or a share with no consumed capacity) all of
// it. A device the inventory does not list is not counted: the node
// publishes only what it lists.
func addClaims(n *fit.Node, st *nodeState) {
	if len(st.claims) == 0 {
		return
	}
	byDevice := make(map[string]protocol.GPU, len(st.gpus))
	for _, g := range st.gpus {
		byDevice[dradevices.DeviceName(g.UUID)] = g
	}
	for _, rs := range st.claims {
		var held podmodel.ContainerPlacement
		for _, r := range rs {
			g, ok := byDevice[r.Device]
			if !ok {
				continue
			}
			held.GPUs = append(held.GPUs, dradevices.Slice(g, st.mig[g.UUID] != nil, r))
		}
		if len(held.GPUs) > 0 {
			fit.Add(n, podmodel.Placement{held})
		}
	}
}

// ClaimCharge is what quota charges for what cl was allocated of the
// devices the books know (dradevices.Charge), and whether it was
// allocated any of them.
func (c *Ledger) ClaimCharge(cl *resourceapi.ResourceClaim) (podmodel.Usage, bool) {
	if cl.Status.Allocation == nil {
		return podmodel.Usage{}, false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return dradevices.Charge(cl.Status.Allocation.Devices.Results, func(pool, device string) (protocol.GPU, bool, bool) {
		st, ok := c.nodes[pool]
		if !ok {
			return protocol.GPU{}, false, false
		}
		for _, g := range st.gpus {
			if dradevices.DeviceName(g.UUID) == device {
				return g, st.mig[g.UUID] != nil, true
			}
		}
		return protocol.GPU{}, false, false
	})
}
