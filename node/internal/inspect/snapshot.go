// Package inspect is the node-local debug view behind `vgpud inspect`: the
// daemon serves a snapshot over a unix socket, the command prints it.
package inspect

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/node/internal/preflight"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// NodeSnapshot is everything `vgpud inspect` shows.
type NodeSnapshot struct {
	Node     string `json:"node"`
	Backend  string `json:"backend"`
	Ready    bool   `json:"ready"`
	NotReady string `json:"notReady,omitempty"` // why not, when not
	Role     string `json:"role"`               // "node" or "node+cluster"
	// Identity is how the node tells a container's pod: "runtime" (NRI)
	// or "guessed"; Runtime says how the NRI hook stands.
	Identity string `json:"identity"`
	Runtime  string `json:"runtime,omitempty"`
	// RuntimeCheck is the latest reading of the runtime's configuration:
	// whether it fails closed without vgpud. nil before the first, or
	// where --runtime-config is empty.
	RuntimeCheck *preflight.Verdict `json:"runtimeCheck,omitempty"`
	Leader       string             `json:"leader"` // the current leader's pod, "" if unknown
	IsLeader     bool               `json:"isLeader"`
	GPUs         []GPUState         `json:"gpus"`
	// CordonProblem says what in the node's vgpud.io/cordon names no GPU
	// here or cannot be read; "" when nothing.
	CordonProblem string              `json:"cordonProblem,omitempty"`
	Allocations   []Allocation        `json:"allocations"`
	Registration  KubeletRegistration `json:"registration"`
	// Use is the latest sample of the GPUs' processes; nil before the
	// GPUs are found.
	Use   *GPUUse   `json:"use,omitempty"`
	Taken time.Time `json:"taken"`
}

// GPUState is one GPUState with what the pods on it hold.
type GPUState struct {
	Index         int    `json:"index"`
	UUID          string `json:"uuid"`
	Model         string `json:"model"`
	NUMA          int    `json:"numa"`
	MemoryMiB     int64  `json:"memoryMiB"` // after memory scaling
	MemoryUsedMiB int64  `json:"memoryUsedMiB"`
	Cores         int    `json:"cores"`
	CoresUsed     int    `json:"coresUsed"`
	Slices        int    `json:"slices"`
	SlicesUsed    int    `json:"slicesUsed"`
	Healthy       bool   `json:"healthy"`
	// Cordoned: an operator took it out of new placements
	// (vgpud.io/cordon on the node); its pods run on.
	Cordoned bool `json:"cordoned,omitempty"`
	// MIG, for a MIG instance, is its profile and Parent its GPU's UUID;
	// the row's memory is the instance's, its cores its share of the
	// GPU's SMs, and it has one slice, held whole.
	MIG    string `json:"mig,omitempty"`
	Parent string `json:"parent,omitempty"`
}

// Allocation is one container's share of one GPU.
type Allocation struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	GPU       string `json:"gpu"`
	MemoryMiB int64  `json:"memoryMiB"`
	Cores     int    `json:"cores"`
	Phase     string `json:"phase"`
}

// KubeletRegistration is the device plugin's record with kubelet.
type KubeletRegistration struct {
	Count     int       `json:"count"`
	Last      time.Time `json:"last,omitzero"`
	LatencyMs float64   `json:"latencyMs"`
	Trigger   string    `json:"trigger,omitempty"`
	Error     string    `json:"error,omitempty"`
}

// Usage fills the GPUs' used columns and lists the allocations from the
// node's pods. A pod assigned here holds its share until it terminates,
// counted by podmodel's footprint rule (init containers at peak, sidecars
// for the pod's life, app containers summed), so inspect agrees with the
// leader's books.
//
// phase says where a container's share stands; nil reads the pod's
// vgpud.io/phase annotation, which the guessing path writes.
func Usage(node string, inv protocol.Inventory, pods []*corev1.Pod, phase func(p *corev1.Pod, container string) string) ([]GPUState, []Allocation) {
	if phase == nil {
		phase = func(p *corev1.Pod, _ string) string { return p.Annotations[protocol.AnnotationPhase] }
	}
	rows := rowsOf(inv)
	uuids := make([]string, len(rows))
	for i, g := range rows {
		uuids[i] = g.UUID
	}
	used := make([]podmodel.Usage, len(rows))
	allocs := []Allocation{}
	for _, p := range pods {
		raw, ok := p.Annotations[protocol.AnnotationAssignment]
		if !ok || podmodel.Terminated(p) {
			continue
		}
		a, err := protocol.DecodeAssignment(raw)
		if err != nil || a.Node != node {
			continue
		}
		for _, c := range a.Containers {
			ph := phase(p, c.Name)
			for _, s := range c.GPUs {
				allocs = append(allocs, Allocation{Namespace: p.Namespace, Pod: p.Name, Container: c.Name, GPU: s.UUID, MemoryMiB: s.MemoryMiB, Cores: s.Cores, Phase: ph})
			}
		}
		for i, u := range podmodel.PlacementOf(a, podmodel.Kinds(&p.Spec)).Footprint(uuids) {
			used[i] = used[i].Plus(u)
		}
	}
	gpus := make([]GPUState, len(rows))
	for i, g := range rows {
		gpus[i] = g
		gpus[i].MemoryUsedMiB, gpus[i].CoresUsed, gpus[i].SlicesUsed = used[i].MemMiB, used[i].Cores, used[i].Slots
	}
	slices.SortFunc(allocs, func(a, b Allocation) int {
		return strings.Compare(a.Namespace+"/"+a.Pod+"/"+a.Container+"/"+a.GPU, b.Namespace+"/"+b.Pod+"/"+b.Container+"/"+b.GPU)
	})
	return gpus, allocs
}

// rowsOf is a row per GPU as the leader books them (shared GPUs, then
// each MIG instance), unused.
func rowsOf(inv protocol.Inventory) []GPUState {
	gpus, mig := inv.Bookable()
	out := make([]GPUState, len(gpus))
	for i, g := range gpus {
		out[i] = GPUState{Index: g.Index, UUID: g.UUID, Model: g.Model, NUMA: g.NUMA, Healthy: g.Healthy,
			MemoryMiB: g.MemoryMiB, Cores: g.Cores, Slices: g.Split}
		if r := mig[g.UUID]; r != nil {
			out[i].MIG, out[i].Parent = r.Profile, r.GPU
		}
	}
	return out
}

// Rows are inspect's GPU rows and allocations for node: inv's GPUs, in
// the order the leader books them, each marked where mark (the node's
// cordon) names it, with what mark cannot place or read; an instance
// the node may make and has not, and nobody holds, is left out.
func Rows(node string, inv protocol.Inventory, pods []*corev1.Pod, phase func(p *corev1.Pod, container string) string,
	mark func([]protocol.GPU, map[string]*protocol.MIGRef) ([]bool, string)) ([]GPUState, []Allocation, string) {
	gpus, allocs := Usage(node, inv, pods, phase)
	// Over the GPUs as the leader books them, the rows' order: a MIG
	// GPU's index or UUID cordons its instances.
	booked, mig := inv.Bookable()
	cordoned, problem := mark(booked, mig)
	for i := range gpus {
		gpus[i].Cordoned = cordoned[i]
	}
	return slices.DeleteFunc(gpus, unmade(inv)), allocs, problem
}

// unmade says whether a row is an instance the node may make on demand
// and has not made, nor is it booked: one of many alternatives, which
// would drown the rows that hold something.
func unmade(inv protocol.Inventory) func(GPUState) bool {
	made := map[string]bool{}
	for _, g := range inv.MIG {
		for _, p := range g.Possible {
			made[p.UUID] = p.Made != ""
		}
	}
	return func(r GPUState) bool {
		isMade, possible := made[r.UUID]
		return possible && !isMade && r.SlicesUsed == 0
	}
}
