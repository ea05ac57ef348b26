// Package fit is vgpud's scheduling core: whether a pod fits a node, how
// a node scores, and which GPUs a pod's containers get. It is pure — plain
// structs in and out, no client-go, no clock, deterministic output — so it
// is table-tested and benchmarked on synthetic clusters.
package fit

import (
	"math/bits"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// CommittedGPU is one physical GPU of a node with what is committed on it.
type CommittedGPU struct {
	protocol.GPU
	Used podmodel.Usage // committed on it
	// Cordoned: an operator took it out of new placements
	// (wellknown.AnnotationCordon); what runs on it stays.
	Cordoned bool
	// MIG, for a MIG instance, is what it is part of; nil for a GPU
	// shared in slices. An instance's GPU fields are the instance: its
	// memory, its share of the parent's SMs as Cores, and split 1, for it
	// is held whole (protocol.Inventory.Bookable).
	MIG *protocol.MIGRef
	// Blocked: a possible MIG instance (MIG.OnDemand) that overlaps one
	// booked or made on its GPU, so it cannot be made.
	Blocked bool
	// Held is the MiB the GPU holds beyond the slices booked on it, as
	// its node last reported (protocol.NodeUsage.Held): counted as used
	// memory, by the fit and by how full the GPU and its node look.
	// Full: its processes hold all its memory; no slice fits there. Both
	// are of a GPU shared in slices: a MIG instance has neither.
	Held int64
	Full bool
}

// Node is a schedulable node: its GPUs in index order.
type Node struct {
	Name string
	GPUs []CommittedGPU
	// Features the node's vgpud honours in an assignment's requires list
	// (protocol.Inventory.Features).
	Features []string
	// Sets are the node's connected GPU sets, closest link first
	// (protocol.Inventory.Sets); shared, never changed in place.
	Sets []Set
}

// Set is a connected GPU set: Mask has bit i for n.GPUs[i].
type Set struct {
	Link string // protocol.LinkNVLink or protocol.LinkPCIeSwitch
	Mask uint64
}

// SetsOf turns an inventory's sets into masks over gpus (in the order
// fit.Node holds them), skipping a link this build does not know and a
// GPU beyond the 64 a mask holds.
func SetsOf(sets []protocol.GPUSet, gpus []protocol.GPU) []Set {
	var out []Set
	pos := make(map[int]int, len(gpus))
	for i, g := range gpus {
		pos[g.Index] = i
	}
	for _, s := range sets {
		if s.Link != protocol.LinkNVLink && s.Link != protocol.LinkPCIeSwitch {
			continue
		}
		var m uint64
		for _, idx := range s.GPUs {
			if i, ok := pos[idx]; ok && i < 64 {
				m |= 1 << i
			}
		}
		if bits.OnesCount64(m) >= 2 {
			out = append(out, Set{Link: s.Link, Mask: m})
		}
	}
	return out
}

// Request is what a pod asks, with its selectors and policies.
type Request struct {
	Containers []podmodel.ContainerRequest // init containers first, as podmodel.Requests gives them
	UseTypes   []string                    // model must contain one of these (case-insensitive)
	NoUseTypes []string
	UseUUIDs   []string
	NoUseUUIDs []string
	GPUPolicy  podmodel.GPUPolicy // how GPUs are chosen among those that fit (policy.go)
	SingleNUMA bool               // all GPUs of a container on one NUMA node (nvidia.com/numa-bind)
	Mode       podmodel.GPUMode   // shared slices, MIG instances, or either
}

// Options are cluster-wide defaults.
type Options struct {
	// DefaultMemPercent is the share of a GPU's memory a container gets
	// when it names neither gpumem nor gpumem-percentage; 100 = whole card.
	DefaultMemPercent int
	// DefaultCores is the share of a GPU's cores, in percent, a
	// container gets when it names no gpucores (or 0); 0 here means a
	// slot's share of the GPU it lands on (podmodel.SlotShare).
	DefaultCores int
}

// Reason says why a pod does not fit a node. Kind groups reasons across
// nodes for one summary line; Text is the detail for this node.
type Reason struct {
	Kind string
	Text string
	// Passing says the condition ends by itself soon (vgpud restarting on
	// the node) without an event kube-scheduler would requeue the pod on.
	Passing bool
}
