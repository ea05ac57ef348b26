package books

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// What the books hold of nodes: their inventories, as node events bring
// them, and each node's usage, recounted from its pods.

// SetNode records a node's inventory, whether its plugin is up, and what
// its GPUs hold beyond their bookings. A node with a corrupt inventory is
// kept, unusable, with the error for reasons.
func (c *Ledger) SetNode(n *corev1.Node) {
	c.mu.Lock()
	st := c.node(n.Name)
	q := n.Status.Allocatable[corev1.ResourceName(c.names.GPU)]
	st.usable = q.Value() > 0
	st.plugin = n.Annotations[wellknown.AnnotationPlugin]
	st.exact = n.Annotations[wellknown.AnnotationIdentity] == wellknown.IdentityRuntime
	wasCordoned, wasUnreadable, hadGPUs, hadMIG := st.cordoned, st.cordonErr != nil, st.gpus, st.mig
	st.gpus, st.mig, st.features, st.sets, st.kept, st.invErr = nil, nil, nil, nil, nil, nil
	if raw, ok := n.Annotations[wellknown.AnnotationGPUs]; ok {
		inv, err := protocol.DecodeInventory(raw)
		if err != nil {
			st.invErr = err
		} else {
			st.gpus, st.mig = inv.Bookable()
			keepUUIDs(st.gpus, hadGPUs)
			st.features = inv.Features
			st.sets = fit.SetsOf(inv.Sets, inv.GPUs)
			st.kept = keptOf(inv)
		}
	}
	hadHeld, usage := st.held, n.Annotations[wellknown.AnnotationUsage]
	if usage != st.usageRaw {
		// Decoded only when it changed: a node's usage is up to
		// protocol.MaxUsageBytes, and nodes change for other reasons.
		st.held = heldOf(usage)
	}
	st.usageRaw = usage // the informer's copy, not one more kept alive
	st.cordoned, st.cordonErr = nil, nil
	if cd, err := protocol.NodeCordon(n.Annotations); err != nil {
		st.cordonErr = err
	} else {
		st.cordoned = map[string]bool{}
		marked, _ := cd.Resolve(st.gpus, st.mig)
		for i, g := range st.gpus {
			if marked[i] {
				st.cordoned[g.UUID] = true
			}
		}
	}
	// A GPU back in service frees room as a pod's going would: pods
	// refused meanwhile are nudged (kube-scheduler may have filtered them
	// against the books before this event reached them).
	// So does a GPU added, put back, or healthy again.
	lifted := wasUnreadable && st.cordonErr == nil
	for u := range wasCordoned {
		lifted = lifted || !st.cordoned[u]
	}
	for _, g := range st.gpus {
		i := slices.IndexFunc(hadGPUs, func(h protocol.GPU) bool { return h.UUID == g.UUID })
		lifted = lifted || (g.Healthy && (i < 0 || !hadGPUs[i].Healthy))
		// So does an instance made on demand destroyed: the placements
		// it blocked are free.
		if was, now := hadMIG[g.UUID], st.mig[g.UUID]; was != nil && now != nil && was.Made && !now.Made {
			lifted = true
		}
	}
	// So does memory a GPU held beyond its bookings, freed.
	for u, was := range hadHeld {
		now := st.held[u]
		lifted = lifted || now.MiB < was.MiB || (was.Full && !now.Full)
	}
	if st.invErr == nil {
		// While the inventory does not read, its kept instances are
		// unknown: the pods they name are not forgotten meanwhile.
		c.forget(st, c.clock.Now())
	}
	c.setSmallest(st)
	c.recompute(n.Name)
	c.mu.Unlock()
	c.tellFreed(lifted)
}

// DeleteNode forgets a node; its pods stay booked until they go too.
func (c *Ledger) DeleteNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.nodes[name]; ok {
		st.gpus, st.usable, st.held, st.kept, st.past, st.usageRaw = nil, false, nil, nil, nil, ""
		c.setSmallest(st)
		c.recompute(name)
	}
}

func (c *Ledger) node(name string) *nodeState {
	st, ok := c.nodes[name]
	if !ok {
		st = &nodeState{pods: map[types.UID]bool{}, gone: map[string]time.Time{}}
		c.nodes[name] = st
		c.nodeGen++ // a name resolved to none now resolves to st
	}
	return st
}

// recompute rebuilds one node's usage from its pods' placements, so no
// sequence of events can leave usage that no pod explains.
func (c *Ledger) recompute(name string) {
	st := c.node(name)
	st.current = c.usage(name, "")
	st.fullness = fit.Fullness(st.current)
	st.charges = c.heldCharges(name)
	if len(st.charges) > 0 {
		c.charging[name] = true
	} else {
		delete(c.charging, name)
	}
	c.refreshInFlight(name)
}

// usage is the node's GPUs with what its pods, except one, hold.
func (c *Ledger) usage(name string, except types.UID) fit.Node {
	st := c.node(name)
	n := c.bare(name, st)
	for uid := range st.pods {
		if uid != except {
			fit.Add(&n, c.pods[uid].placement)
		}
	}
	return n
}

// bare is node name's GPUs as fit sees them with no pod booked: their
// cordons, the memory the node reports held beyond its bookings, the MIG
// instances it made, the DRA claims allocated there (none preemptible).
func (c *Ledger) bare(name string, st *nodeState) fit.Node {
	n := fit.Node{Name: name, GPUs: make([]fit.CommittedGPU, len(st.gpus)), Features: st.features, Sets: st.sets}
	for i, g := range st.gpus {
		n.GPUs[i] = fit.CommittedGPU{GPU: g, Cordoned: st.cordoned[g.UUID], MIG: st.mig[g.UUID]}
		if h, ok := st.held[g.UUID]; ok && n.GPUs[i].MIG == nil {
			n.GPUs[i].Held, n.GPUs[i].Full = h.MiB, h.Full
		}
	}
	fit.BlockMade(&n)
	addClaims(&n, st)
	return n
}

// heldOf is what a node's AnnotationUsage value raw says its GPUs hold
// beyond their bookings (Held). Nothing is held where the node publishes
// none ("") or a value that does not decode: such a node stays usable,
// as one too old to publish it is, and inspect names the bad value.
func heldOf(raw string) map[string]protocol.GPUHeld {
	if raw == "" {
		return nil
	}
	u, err := protocol.DecodeUsage(raw)
	if err != nil {
		return nil
	}
	return Held(u)
}

// Held is, by GPU UUID, what u says each GPU holds beyond the slices
// booked on it; nil where nothing. A GPU listed twice counts the larger
// figure, and is full if either says so: what is held is not free.
func Held(u protocol.NodeUsage) map[string]protocol.GPUHeld {
	if len(u.Held) == 0 {
		return nil
	}
	out := make(map[string]protocol.GPUHeld, len(u.Held))
	for _, h := range u.Held {
		if was, ok := out[h.GPU]; ok {
			if was.MiB > h.MiB {
				h.Pods = was.Pods // the pods of the figure kept
			}
			h.MiB, h.Full = max(h.MiB, was.MiB), h.Full || was.Full
		}
		out[h.GPU] = h
	}
	return out
}

// keepUUIDs names each GPU by the UUID string it had before the node's
// inventory was decoded again, where it is the same: the bookings made
// before share that string (shareUUIDs).
func keepUUIDs(gpus, had []protocol.GPU) {
	for i := range gpus {
		gpus[i].UUID = sameUUID(had, gpus[i].UUID)
	}
}

// sameUUID is the string of the GPU in gpus whose UUID equals uuid, or
// uuid where none does: equal, but stored once.
func sameUUID(gpus []protocol.GPU, uuid string) string {
	for _, g := range gpus {
		if g.UUID == uuid {
			return g.UUID
		}
	}
	return uuid
}
