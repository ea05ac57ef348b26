// Package core is vgpud's scheduling core: whether a pod fits a node, how
// a node scores, and which GPUs a pod's containers get. It is pure — plain
// structs in and out, no client-go, no clock, deterministic output — so it
// is table-tested and benchmarked on synthetic clusters.
package core

import "github.com/vgpud/vgpud/protocol"

// Policies for choosing nodes and GPUs.
const (
	Binpack = "binpack"
	Spread  = "spread"
)

// Usage is what is committed on one GPU.
type Usage struct {
	MemMiB    int64
	Cores     int
	Slots     int
	Exclusive bool // a 100-core container holds it; nobody joins
}

func (u Usage) idle() bool { return u.MemMiB == 0 && u.Cores == 0 && u.Slots == 0 }

// GPU is one physical GPU of a node with what is committed on it.
type GPU struct {
	protocol.GPU
	Used Usage
}

// Node is a schedulable node: its GPUs in index order.
type Node struct {
	Name string
	GPUs []GPU
}

// Request is what a pod asks, with its selectors and policies.
type Request struct {
	Containers []protocol.ContainerRequest // init containers first, as protocol.PodRequests gives them
	UseTypes   []string                    // model must contain one of these (case-insensitive)
	NoUseTypes []string
	UseUUIDs   []string
	NoUseUUIDs []string
	GPUPolicy  string // Spread (default) or Binpack
	SingleNUMA bool   // all GPUs of a container on one NUMA node
}

// Options are cluster-wide defaults.
type Options struct {
	// DefaultMemPercent is the share of a GPU's memory a container gets
	// when it names neither gpumem nor gpumem-percentage; 100 = whole card.
	DefaultMemPercent int
}

// ContainerPlacement is the GPUs one container gets.
type ContainerPlacement struct {
	Name string
	Kind protocol.ContainerKind
	GPUs []protocol.GPUSlice
}

// Placement is a pod's GPUs, container by container in kubelet's order.
type Placement []ContainerPlacement

// Assignment renders p as the vgpud.io/assignment value's containers.
func (p Placement) Assignment(node string) protocol.Assignment {
	a := protocol.Assignment{Version: protocol.Version, Node: node}
	for _, c := range p {
		a.Containers = append(a.Containers, protocol.ContainerAssignment{Name: c.Name, GPUs: c.GPUs})
	}
	return a
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
