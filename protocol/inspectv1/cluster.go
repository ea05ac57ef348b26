package inspectv1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
)

// ClusterVersion is ClusterView's APIVersion.
const ClusterVersion = "vgpud.io/cluster-view/v1"

// ClusterView is the whole cluster.
type ClusterView struct {
	// APIVersion is ClusterVersion: what a reader checks before decoding.
	APIVersion string      `json:"apiVersion"`
	Nodes      []NodeView  `json:"nodes"`
	Namespaces []Namespace `json:"namespaces"`
	// HAMi are the records of pods HAMi placed that the books hold, for
	// an operator to audit: one written before vgpud was installed stays
	// booked for as long as its pod runs.
	HAMi []HAMiRecord `json:"hamiRecords,omitempty"`
	// Problems are annotations vgpud would not book, each with its pod or
	// node: the leader skips them too (books.Bookable).
	Problems []string `json:"problems,omitempty"`
	// At is when the view was read, which ages are counted from.
	At time.Time `json:"at"`
	// Namespace and Node say what the view was narrowed to (Filter).
	Namespace string `json:"namespace,omitempty"`
	Node      string `json:"node,omitempty"`
}

// HAMiRecord is one pod HAMi placed, as booked from its record.
type HAMiRecord struct {
	Pod     string      `json:"pod"` // namespace/name
	Node    string      `json:"node"`
	Created metav1.Time `json:"created"`
	// Slices are its GPUs, "UUID MiB/cores%" each, in the record's order.
	Slices []string `json:"slices"`
}

// NodeView is one node with vgpud's inventory.
type NodeView struct {
	Name     string       `json:"name"`
	Identity string       `json:"identity"` // runtime or guessed
	Plugin   string       `json:"plugin"`   // serving or draining
	GPUs     []GPUBooking `json:"gpus"`
	// Use is the node's latest published sample of what its GPUs'
	// processes hold (vgpud.io/usage); nil where it publishes none.
	Use *protocol.NodeUsage `json:"use,omitempty"`
	// Runtime is the node's latest runtime check (vgpud.io/runtime-check):
	// whether its container runtime fails closed without vgpud; nil where
	// it publishes none.
	Runtime *protocol.RuntimeCheck `json:"runtimeCheck,omitempty"`
}

// GPUBooking is one GPU with what is held of it.
type GPUBooking struct {
	Index         int      `json:"index"`
	UUID          string   `json:"uuid"`
	Model         string   `json:"model"`
	Healthy       bool     `json:"healthy"`
	Cordoned      bool     `json:"cordoned,omitempty"` // an operator's vgpud.io/cordon
	MemoryMiB     int64    `json:"memoryMiB"`
	MemoryUsedMiB int64    `json:"memoryUsedMiB"`
	Cores         int      `json:"cores"`
	CoresUsed     int      `json:"coresUsed"`
	Slots         int      `json:"slots"`
	SlotsUsed     int      `json:"slotsUsed"`
	Exclusive     bool     `json:"exclusive"`
	Pods          []string `json:"pods"` // namespace/name holding a slice
	// Claims are the DRA claims kube-scheduler allocated a share of the
	// GPU to (namespace/name), where its node serves claims; their
	// shares are in the used figures.
	Claims []string `json:"claims,omitempty"`
	// HeldMiB is what the GPU holds beyond the slices booked on it, as
	// its node last published (vgpud.io/usage), which the leader counts
	// as used; Full: the leader places nothing more on it.
	HeldMiB int64 `json:"heldMiB,omitempty"`
	Full    bool  `json:"full,omitempty"`
}

// Namespace is one namespace's vGPU quota: what its pods are charged
// (bind's rule, podmodel.Placement.Charge) and its hard limits, nil
// where no ResourceQuota sets one.
type Namespace struct {
	Name          string `json:"name"`
	MemoryUsedMiB int64  `json:"memoryUsedMiB"`
	CoresUsed     int    `json:"coresUsed"`
	MemoryLimit   *int64 `json:"memoryLimitMiB,omitempty"`
	CoresLimit    *int64 `json:"coresLimit,omitempty"`
}
