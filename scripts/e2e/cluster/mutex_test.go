//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// gpuMutex: a tenant's pod with HAMi's mutex policy (in a chain) gets an idle GPU and
// keeps it alone: a later pod aimed at that GPU waits, and so does a
// mutex pod aimed at a GPU in use, each saying why. The mutex pod's slice
// is what it asked, but its namespace is charged the whole GPU, which is
// what it denies others (HAMi binds only the arriving pod: its issue
// #3038).
func gpuMutex(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	const ns, others = "e2e-mutex", "e2e-mutex-others"
	newTenant(t, e, ns)
	newTenant(t, e, others)
	e.idleGPUs(t)
	node := nodes[len(nodes)-1]
	inv := e.inventory(t, node)
	if len(inv.GPUs) < 2 {
		t.Fatalf("node %s: %d GPUs; the scenario needs two", node, len(inv.GPUs))
	}
	pod := func(name string, annotations map[string]string) *corev1.Pod {
		p := gpuPod(name, map[string]string{"nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "30"}, annotations)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		return p
	}
	create := func(namespace string, p *corev1.Pod) {
		t.Helper()
		if _, err := e.impersonate(t, "system:serviceaccount:"+namespace+":tenant", nil).CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gpuOf := func(namespace, name string) protocol.GPUSlice {
		t.Helper()
		p, err := e.kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
		if err != nil || len(a.Containers) != 1 || len(a.Containers[0].GPUs) != 1 {
			t.Fatalf("%s: assignment %+v, %v", name, a, err)
		}
		return a.Containers[0].GPUs[0]
	}

	first := inv.GPUs[0]
	create(others, pod("sharer", map[string]string{wellknown.AnnotationUseGPUUUID: first.UUID}))
	e.waitRunning(t, others, []string{"sharer"}, 90*time.Second)
	// A chain the scheduler cannot honour is refused at create, saying why.
	if _, err := e.impersonate(t, "system:serviceaccount:"+ns+":tenant", nil).CoreV1().Pods(ns).Create(ctx, pod("unknown", map[string]string{wellknown.AnnotationGPUPolicyHAMi: "binpack,nvlink"}), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), `unknown policy "nvlink"`) {
		t.Fatalf("a chain naming an unknown policy: %v", err)
	}
	// HAMi's own example chain: held alone, chosen by binpack, numa last.
	create(ns, pod("alone", map[string]string{wellknown.AnnotationGPUPolicyHAMi: "mutex,binpack,numa"}))
	e.waitRunning(t, ns, []string{"alone"}, 90*time.Second)
	held := gpuOf(ns, "alone")
	if held.UUID == first.UUID || !held.Exclusive || held.MemoryMiB != 1000 || held.Cores != 30 {
		t.Fatalf("the mutex pod got %+v; want an idle GPU, held alone, with the slice it asked", held)
	}
	env := e.containerEnv(t, ns, "alone")
	t.Logf("the mutex pod holds %s alone; its container sees %v", held.UUID, env)

	create(others, pod("joiner", map[string]string{wellknown.AnnotationUseGPUUUID: held.UUID}))
	create(others, pod("mutex-on-busy", map[string]string{wellknown.AnnotationGPUPolicyHAMi: "mutex", wellknown.AnnotationUseGPUUUID: first.UUID}))
	harness.Eventually(t, 60*time.Second, "joiner refused: the GPU is held alone", func() error {
		return e.eventSays(others, "joiner", "exclusive")
	})
	harness.Eventually(t, 60*time.Second, "mutex-on-busy refused: its GPU is not idle", func() error {
		return e.eventSays(others, "mutex-on-busy", "not idle")
	})
	for _, name := range []string{"joiner", "mutex-on-busy"} {
		if p, err := e.kube.CoreV1().Pods(others).Get(ctx, name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
			t.Errorf("%s bound (%v)", name, err)
		}
	}

	leader, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	var whole protocol.GPU
	for _, g := range inv.GPUs {
		if g.UUID == held.UUID {
			whole = g
		}
	}
	want := fmt.Sprintf(`vgpud_namespace_quota_memory_used_bytes{namespace=%q} %g`, ns, float64(whole.MemoryMiB)*(1<<20))
	harness.Eventually(t, 30*time.Second, "the mutex pod's namespace charged the whole GPU", func() error {
		m, err := e.scrape(leader)
		if err != nil {
			return err
		}
		return harness.Contains(m, want, fmt.Sprintf(`vgpud_namespace_quota_cores_used_ratio{namespace=%q} 1`, ns))
	})
	// Once it goes, the GPU is anyone's again.
	grace := int64(0)
	if err := e.kube.CoreV1().Pods(ns).Delete(ctx, "alone", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, others, []string{"joiner"}, 90*time.Second)
}
