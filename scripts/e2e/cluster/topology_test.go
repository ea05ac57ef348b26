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
	"github.com/vgpud/vgpud/scripts/harness"
)

// gpuTopology: each node publishes the connected GPU sets it worked out
// from NVML (the DGX mock: one NVLink set of eight; vgpud-node-3's four
// L4s: two PCIe switches, alternating), and a tenant's two-GPU pod with
// HAMi's topology-aware policy gets two GPUs behind one switch, where
// spread alone would take GPUs 0 and 1.
func gpuTopology(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	const ns = "e2e-topology"
	newTenant(t, e, ns)
	e.idleGPUs(t)
	dgx := e.inventory(t, nodes[0])
	if len(dgx.Sets) == 0 || dgx.Sets[0].Link != protocol.LinkNVLink || len(dgx.Sets[0].GPUs) != len(dgx.GPUs) {
		t.Fatalf("node %s: sets %v; want one NVLink set of all %d GPUs first", nodes[0], dgx.Sets, len(dgx.GPUs))
	}
	l4 := "vgpud-node-3"
	sets := e.inventory(t, l4).Sets
	if want := []protocol.GPUSet{{Link: protocol.LinkPCIeSwitch, GPUs: []int{0, 2}}, {Link: protocol.LinkPCIeSwitch, GPUs: []int{1, 3}}}; !slices.EqualFunc(sets, want, func(a, b protocol.GPUSet) bool { return a.Link == b.Link && slices.Equal(a.GPUs, b.GPUs) }) {
		t.Fatalf("node %s: sets %v, want %v", l4, sets, want)
	}
	t.Logf("%s publishes %v; %s %d sets, the first %v", l4, sets, nodes[0], len(dgx.Sets), dgx.Sets[0])

	p := gpuPod("pair", map[string]string{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"}, map[string]string{wellknown.AnnotationGPUPolicyHAMi: "spread,topology-aware"})
	p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": l4}
	if _, err := e.impersonate(t, "system:serviceaccount:"+ns+":tenant", nil).CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, ns, []string{"pair"}, 90*time.Second)
	idx := e.assignedIndices(t, ns, "pair", e.inventory(t, l4))
	if fmt.Sprint(idx) != "[0 2]" {
		t.Fatalf("the pair got GPUs %v; want 0 and 2, behind one PCIe switch", idx)
	}
	t.Logf("a two-GPU pod with spread,topology-aware got GPUs %v of %s", idx, l4)

	// numa-bind on the DGX node (four GPUs to a NUMA node): four GPUs
	// come from one NUMA node; five are refused, saying why.
	bound := func(name, gpus string) {
		t.Helper()
		p := gpuPod(name, map[string]string{"nvidia.com/gpu": gpus, "nvidia.com/gpumem": "1000"}, map[string]string{wellknown.AnnotationNUMABind: "true", wellknown.AnnotationGPUPolicyHAMi: "binpack,topology-aware"})
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": nodes[0]}
		if _, err := e.impersonate(t, "system:serviceaccount:"+ns+":tenant", nil).CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bound("four", "4")
	bound("five", "5")
	e.waitRunning(t, ns, []string{"four"}, 90*time.Second)
	four, err := e.kube.CoreV1().Pods(ns).Get(ctx, "four", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fa, err := protocol.DecodeAssignment(four.Annotations[wellknown.AnnotationAssignment])
	if err != nil {
		t.Fatal(err)
	}
	numaOf := map[string]int{}
	for _, g := range dgx.GPUs {
		numaOf[g.UUID] = g.NUMA
	}
	seen := map[int]bool{}
	for _, s := range fa.Containers[0].GPUs {
		seen[numaOf[s.UUID]] = true
	}
	if len(fa.Containers[0].GPUs) != 4 || len(seen) != 1 {
		t.Fatalf("numa-bind four: %d GPUs on NUMA nodes %v; want four on one", len(fa.Containers[0].GPUs), seen)
	}
	harness.Eventually(t, 60*time.Second, "five GPUs with numa-bind refused", func() error {
		return e.eventSays(ns, "five", "no single NUMA node")
	})
}
