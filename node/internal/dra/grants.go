package dra

import (
	"fmt"
	"slices"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/dradevices"
)

// Grant is one device a claim was allocated on this node, as prepared:
// what the runtime hook gives a container of a pod the claim was
// reserved for.
type Grant struct {
	Request   string `json:"request"`
	Device    string `json:"device"` // as published (dradevices.DeviceName)
	UUID      string `json:"uuid"`   // the GPU's or the MIG device's
	MemoryMiB int64  `json:"memoryMiB"`
	Cores     int    `json:"cores"`
	// Slots are what the grant takes of its GPU's split: 1 on a shared
	// GPU, all of them where the claim holds the device whole.
	Slots int  `json:"slots"`
	MIG   bool `json:"mig,omitempty"` // UUID is a MIG device, held whole
	// Share: a share of a GPU others share too (its consumed capacity),
	// which vgpud holds the containers it serves to together; not a
	// device held whole.
	Share   bool   `json:"share,omitempty"`
	ShareID string `json:"shareID,omitempty"`
	CDI     string `json:"cdi"` // its CDI device's name, <claim UID>-<index>
	// Nodes are the device nodes its CDI device brings: the runtime hook
	// lets a container reach these, and no other GPU's.
	Nodes []string `json:"nodes"`
	// Claim is its claim's "namespace/name" as Resolve returns it; the
	// record keeps it once per claim (Prepared).
	Claim string `json:"-"`
}

// offer is one published device as the node offers it.
type offer struct {
	uuid      string
	shared    bool
	mig       bool
	memoryMiB int64
	cores     int // a whole GPU's, scaled; a MIG instance's share
	slots     int
}

// offers are inv's devices by name, as dradevices.Devices publishes them.
func offers(inv protocol.Inventory) map[string]offer {
	out := make(map[string]offer, len(inv.GPUs))
	for _, g := range inv.GPUs {
		out[dradevices.DeviceName(g.UUID)] = offer{uuid: g.UUID, shared: true, memoryMiB: g.MemoryMiB, cores: g.Cores, slots: max(g.Split, 1)}
	}
	for _, g := range inv.MIG {
		for _, in := range g.Instances {
			out[dradevices.DeviceName(in.UUID)] = offer{uuid: in.UUID, mig: true, memoryMiB: in.MemoryMiB, cores: g.Cores(in), slots: 1}
		}
	}
	return out
}

// fenced are inv's devices, by UUID, that carry a taint of vgpud's, and
// why: an instance's GPU's health and marks are its own.
func fenced(inv protocol.Inventory, m dradevices.Marks) map[string]string {
	out := map[string]string{}
	why := func(uuid string, healthy bool, also ...string) string {
		switch {
		case !healthy:
			return "unhealthy"
		case m.Booked[uuid] || slices.ContainsFunc(also, func(u string) bool { return m.Booked[u] }):
			return "held by pods the extender placed"
		case m.Cordoned[uuid] || slices.ContainsFunc(also, func(u string) bool { return m.Cordoned[u] }):
			return "cordoned (vgpud.io/cordon)"
		}
		return ""
	}
	for _, g := range inv.GPUs {
		if w := why(g.UUID, g.Healthy); w != "" {
			out[g.UUID] = w
		}
	}
	for _, g := range inv.MIG {
		for _, in := range g.Instances {
			if w := why(in.UUID, g.Healthy, g.UUID); w != "" {
				out[in.UUID] = w
			}
		}
	}
	return out
}

// grants are what claim was allocated of this node's devices (pool
// node), each with the CDI device name cdiName gives it. It refuses what
// vgpud did not offer: another node's pool, a device it does not
// publish, a share past the device or outside the request policies, and
// admin access.
func grants(claim *resourceapi.ResourceClaim, node string, offered map[string]offer, cdiName func(i int) string) ([]Grant, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	var out []Grant
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != dradevices.DriverName {
			continue
		}
		where := fmt.Sprintf("claim %s/%s, request %q, device %s/%s", claim.Namespace, claim.Name, r.Request, r.Pool, r.Device)
		if r.Pool != node {
			return nil, fmt.Errorf("%s: allocated from pool %q, not this node's (%s)", where, r.Pool, node)
		}
		if r.AdminAccess != nil && *r.AdminAccess {
			return nil, fmt.Errorf("%s: admin access is not prepared by vgpud; a GPU agent runs as a vgpud GPU agent instead (docs/security-tenants.md)", where)
		}
		o, ok := offered[r.Device]
		if !ok {
			return nil, fmt.Errorf("%s: this node publishes no such device (a GPU gone or renamed since the allocation)", where)
		}
		g := Grant{Request: r.Request, Device: r.Device, UUID: o.uuid, MemoryMiB: o.memoryMiB, Cores: min(o.cores, protocol.MaxPercent), Slots: o.slots, MIG: o.mig, CDI: cdiName(len(out))}
		if r.ShareID != nil {
			g.ShareID = string(*r.ShareID)
		}
		if o.shared && r.ConsumedCapacity != nil {
			var err error
			if g.MemoryMiB, g.Cores, g.Slots, err = share(r.ConsumedCapacity, o); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			g.Share = true
		}
		out = append(out, g)
	}
	return out, nil
}

// share reads a shared device's consumed capacity as vgpud's slice: the
// scheduler applied the request policies, so anything outside them was
// not written by it.
func share(consumed map[resourceapi.QualifiedName]resource.Quantity, o offer) (memMiB int64, cores, slots int, err error) {
	mem, ok := consumed[dradevices.CapacityMemory]
	if !ok || mem.Value() < 1<<20 || mem.Value()%(1<<20) != 0 || mem.Value()>>20 > o.memoryMiB {
		return 0, 0, 0, fmt.Errorf("consumed memory %s: want whole MiB from 1Mi to %dMi", quantity(consumed, dradevices.CapacityMemory), o.memoryMiB)
	}
	c, ok := consumed[dradevices.CapacityCores]
	if !ok || c.Value() < 1 || c.Value() > int64(min(o.cores, protocol.MaxPercent)) {
		return 0, 0, 0, fmt.Errorf("consumed cores %s: want 1 to %d", quantity(consumed, dradevices.CapacityCores), min(o.cores, protocol.MaxPercent))
	}
	if s, ok := consumed[dradevices.CapacitySlots]; !ok || s.Value() != 1 {
		return 0, 0, 0, fmt.Errorf("consumed slots %s: want 1", quantity(consumed, dradevices.CapacitySlots))
	}
	return mem.Value() >> 20, int(c.Value()), 1, nil
}

func quantity(m map[resourceapi.QualifiedName]resource.Quantity, name resourceapi.QualifiedName) string {
	if q, ok := m[name]; ok {
		return q.String()
	}
	return "(none)"
}

// overbooked says which of grants would take a device past what it
// offers, together with what is already prepared on it (held): the
// last line against a double booking, should the scheduler's books and
// the node's ever disagree.
func overbooked(held, grants []Grant, offered map[string]offer) error {
	type sum struct {
		mem          int64
		cores, slots int
	}
	used := map[string]*sum{}
	for _, list := range [][]Grant{held, grants} {
		for _, g := range list {
			s := used[g.UUID]
			if s == nil {
				s = &sum{}
				used[g.UUID] = s
			}
			s.mem, s.cores, s.slots = s.mem+g.MemoryMiB, s.cores+g.Cores, s.slots+g.Slots
		}
	}
	for _, g := range grants {
		o, s := offered[g.Device], used[g.UUID]
		if s.mem > o.memoryMiB || s.cores > o.cores || s.slots > o.slots {
			return fmt.Errorf("device %s would hold %d MiB, %d cores and %d slots of its %d MiB, %d cores and %d slots with the claims already prepared here",
				g.Device, s.mem, s.cores, s.slots, o.memoryMiB, o.cores, o.slots)
		}
	}
	return nil
}

// cdiDevice is the name of a claim's i-th CDI device.
func cdiDevice(claimUID string, i int) string { return claimUID + "-" + strconv.Itoa(i) }
