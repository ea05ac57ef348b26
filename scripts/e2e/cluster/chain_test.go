//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// gpuChains: a chain of GPU policies applies in the order written. On
// the DGX node, with GPU A (NUMA node X) the fullest and GPU B (another
// NUMA node) the next, a tenant's two-GPU pod with HAMi's
// "binpack,numa" gets A and B (load decides, numa only breaks ties),
// and one with "numa,binpack" gets A and the lowest idle GPU of X (one
// NUMA node first, the fullest GPU's).
func gpuChains(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	const ns = "e2e-chains"
	newTenant(t, e, ns)
	e.idleGPUs(t)
	dgx := e.inventory(t, nodes[0])
	gpuA := dgx.GPUs[0]
	bi := slices.IndexFunc(dgx.GPUs, func(g protocol.GPU) bool { return g.NUMA != gpuA.NUMA })
	if bi < 0 {
		t.Fatalf("node %s: every GPU on NUMA node %d; the scenario needs two", nodes[0], gpuA.NUMA)
	}
	gpuB := dgx.GPUs[bi]
	sameNUMA := -1 // the lowest other GPU on A's NUMA node
	for _, g := range dgx.GPUs[1:] {
		if g.NUMA == gpuA.NUMA {
			sameNUMA = g.Index
			break
		}
	}
	if sameNUMA < 0 {
		t.Fatalf("node %s: GPU %d alone on NUMA node %d", nodes[0], gpuA.Index, gpuA.NUMA)
	}
	tenant := e.impersonate(t, "system:serviceaccount:"+ns+":tenant", nil).CoreV1().Pods(ns)
	place := func(name, mem, gpus string, annotations map[string]string) []int {
		t.Helper()
		p := gpuPod(name, map[string]string{"nvidia.com/gpu": gpus, "nvidia.com/gpumem": mem}, annotations)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": nodes[0]}
		if _, err := tenant.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitRunning(t, ns, []string{name}, 90*time.Second)
		return e.assignedIndices(t, ns, name, dgx)
	}
	// A the fullest, B the next: pinned by UUID, as a tenant may.
	place("full", "20000", "1", map[string]string{wellknown.AnnotationUseGPUUUID: gpuA.UUID})
	place("half", "10000", "1", map[string]string{wellknown.AnnotationUseGPUUUID: gpuB.UUID})

	loadFirst := place("binpack-numa", "1000", "2", map[string]string{wellknown.AnnotationGPUPolicyHAMi: "binpack,numa"})
	if want := fmt.Sprint([]int{gpuA.Index, gpuB.Index}); fmt.Sprint(loadFirst) != want {
		t.Fatalf("binpack,numa got GPUs %v; want %s, the two fullest, across NUMA nodes", loadFirst, want)
	}
	numaFirst := place("numa-binpack", "1000", "2", map[string]string{wellknown.AnnotationGPUPolicyHAMi: "numa,binpack"})
	if want := fmt.Sprint([]int{gpuA.Index, sameNUMA}); fmt.Sprint(numaFirst) != want {
		t.Fatalf("numa,binpack got GPUs %v; want %s, the fullest and the next on its NUMA node %d", numaFirst, want, gpuA.NUMA)
	}
	t.Logf("on %s, with GPU %d (NUMA %d) fullest and GPU %d (NUMA %d) next: binpack,numa took %v, numa,binpack took %v",
		nodes[0], gpuA.Index, gpuA.NUMA, gpuB.Index, gpuB.NUMA, loadFirst, numaFirst)
}

// assignedIndices is the GPU indices, on the node inv describes, of the
// one GPU container of pod ns/name, sorted.
func (e env) assignedIndices(t *testing.T, ns, name string, inv protocol.Inventory) []int {
	t.Helper()
	got, err := e.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := protocol.DecodeAssignment(got.Annotations[wellknown.AnnotationAssignment])
	if err != nil || len(a.Containers) != 1 {
		t.Fatalf("pod %s: assignment %+v, %v", name, a, err)
	}
	var idx []int
	for _, s := range a.Containers[0].GPUs {
		i := slices.IndexFunc(inv.GPUs, func(g protocol.GPU) bool { return g.UUID == s.UUID })
		if i < 0 {
			t.Fatalf("pod %s: GPU %s is not on the node", name, s.UUID)
		}
		idx = append(idx, inv.GPUs[i].Index)
	}
	slices.Sort(idx)
	return idx
}
