// Package inspect is the node-local debug view behind `vgpud inspect`: the
// daemon serves a snapshot over a unix socket, the command prints it.
package inspect

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/node/internal/preflight"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/inspectv1"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Usage fills the GPUs' used columns and lists the allocations from the
// node's pods. A pod assigned here holds its share until it terminates,
// counted by podmodel's footprint rule (init containers at peak, sidecars
// for the pod's life, app containers summed), so inspect agrees with the
// leader's books.
//
// phase says where a container's share stands; nil reads the pod's
// vgpud.io/phase annotation, which the guessing path writes.
func Usage(node string, inv protocol.Inventory, pods []*corev1.Pod, phase func(p *corev1.Pod, container string) string) ([]inspectv1.GPUState, []inspectv1.Allocation) {
	if phase == nil {
		phase = func(p *corev1.Pod, _ string) string { return p.Annotations[wellknown.AnnotationPhase] }
	}
	rows := rowsOf(inv)
	uuids := make([]string, len(rows))
	for i, g := range rows {
		uuids[i] = g.UUID
	}
	used := make([]podmodel.Usage, len(rows))
	allocs := []inspectv1.Allocation{}
	for _, p := range pods {
		raw, ok := p.Annotations[wellknown.AnnotationAssignment]
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
				allocs = append(allocs, inspectv1.Allocation{Namespace: p.Namespace, Pod: p.Name, Container: c.Name, GPU: s.UUID, MemoryMiB: s.MemoryMiB, Cores: s.Cores, Phase: ph})
			}
		}
		for i, u := range podmodel.PlacementOf(a, podmodel.Kinds(&p.Spec)).Footprint(uuids) {
			used[i] = used[i].Plus(u)
		}
	}
	gpus := make([]inspectv1.GPUState, len(rows))
	for i, g := range rows {
		gpus[i] = g
		gpus[i].MemoryUsedMiB, gpus[i].CoresUsed, gpus[i].SlicesUsed = used[i].MemMiB, used[i].Cores, used[i].Slots
	}
	slices.SortFunc(allocs, func(a, b inspectv1.Allocation) int {
		return strings.Compare(a.Namespace+"/"+a.Pod+"/"+a.Container+"/"+a.GPU, b.Namespace+"/"+b.Pod+"/"+b.Container+"/"+b.GPU)
	})
	return gpus, allocs
}

// rowsOf is a row per GPU as the leader books them (shared GPUs, then
// each MIG instance), unused.
func rowsOf(inv protocol.Inventory) []inspectv1.GPUState {
	gpus, mig := inv.Bookable()
	out := make([]inspectv1.GPUState, len(gpus))
	for i, g := range gpus {
		out[i] = inspectv1.GPUState{Index: g.Index, UUID: g.UUID, Model: g.Model, NUMA: g.NUMA, Healthy: g.Healthy,
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
	mark func([]protocol.GPU, map[string]*protocol.MIGRef) ([]bool, string)) ([]inspectv1.GPUState, []inspectv1.Allocation, string) {
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
func unmade(inv protocol.Inventory) func(inspectv1.GPUState) bool {
	made := map[string]bool{}
	for _, g := range inv.MIG {
		for _, p := range g.Possible {
			made[p.UUID] = p.Made != ""
		}
	}
	return func(r inspectv1.GPUState) bool {
		isMade, possible := made[r.UUID]
		return possible && !isMade && r.SlicesUsed == 0
	}
}

// RuntimeVerdict is what inspect shows of the runtime check's verdict v;
// nil for none.
func RuntimeVerdict(v *preflight.Verdict) *inspectv1.RuntimeVerdict {
	if v == nil {
		return nil
	}
	return &inspectv1.RuntimeVerdict{Result: v.Result, Runtime: v.Runtime, Config: v.Config, Scope: v.Scope, Files: v.Files, Problems: v.Problems,
		CDI: inspectv1.RuntimeCDI{Enabled: v.CDI.Enabled, SpecDirs: v.CDI.SpecDirs}}
}
