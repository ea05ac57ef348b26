//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// preemption is #53 item 3: a node's GPUs full by memory with fewer pods
// than slots, so that kube-scheduler sees room and proposes no victim. A
// high-priority pod asking one GPU's worth preempts the two pods of one
// GPU only, through vgpud's own preemption, and runs; a pod no
// preemption can help (more memory than any GPU has) evicts nothing.
func preemption(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	const ns = "e2e-preempt"
	e.namespace(t, ns, nil)
	e.idleGPUs(t)
	for name, value := range map[string]int32{"e2e-low": 100, "e2e-high": 100000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		_ = e.kube.SchedulingV1().PriorityClasses().Delete(ctx, name, metav1.DeleteOptions{})
		if _, err := e.kube.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = e.kube.SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	// The node with the fewest GPUs, each filled to 90% of its memory
	// by two pods of low priority (its split leaves free slots).
	var node string
	var inv protocol.Inventory
	for _, n := range nodes {
		got, err := e.kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		i, err := protocol.DecodeInventory(got.Annotations[wellknown.AnnotationGPUs])
		if err != nil {
			t.Fatal(err)
		}
		if node == "" || len(i.GPUs) < len(inv.GPUs) {
			node, inv = n, i
		}
	}
	gpuOf := map[string]string{} // low pod -> its GPU
	var lows []string
	pinned := func(name, class string, limits map[string]string, ann map[string]string) *corev1.Pod {
		p := gpuPod(name, limits, ann)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		p.Spec.PriorityClassName = class
		return p
	}
	for _, g := range inv.GPUs {
		if g.Split < 3 {
			t.Fatalf("GPU %s splits %d ways; the scenario leaves slots free", g.UUID, g.Split)
		}
		for k := range 2 {
			name := fmt.Sprintf("low-%d-%d", g.Index, k)
			p := pinned(name, "e2e-low", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "45"}, map[string]string{wellknown.AnnotationUseGPUUUID: g.UUID})
			if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			lows = append(lows, name)
			gpuOf[name] = g.UUID
		}
	}
	e.waitRunning(t, ns, lows, 180*time.Second)
	t.Logf("node %s: %d GPUs each 90%% full by memory, 2 of %d slots used", node, len(inv.GPUs), inv.GPUs[0].Split)

	running := func() []string {
		pods, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, "low-") && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				out = append(out, p.Name)
			}
		}
		slices.Sort(out)
		return out
	}

	// One GPU's worth at a high priority.
	start := time.Now()
	high := pinned("high", "e2e-high", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}, nil)
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, high, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, ns, []string{"high"}, 120*time.Second)
	took := time.Since(start)
	left := running()
	var gone []string
	for _, name := range lows {
		if !slices.Contains(left, name) {
			gone = append(gone, name)
		}
	}
	if len(gone) != 2 {
		t.Fatalf("preempted %v; want the two pods of one GPU", gone)
	}
	if gpuOf[gone[0]] != gpuOf[gone[1]] {
		t.Fatalf("preempted %v on GPUs %s and %s; want the two pods of one GPU", gone, gpuOf[gone[0]], gpuOf[gone[1]])
	}
	p, err := e.kube.CoreV1().Pods(ns).Get(ctx, "high", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
	if err != nil || len(a.Containers) != 1 || len(a.Containers[0].GPUs) == 0 || a.Containers[0].GPUs[0].UUID != gpuOf[gone[0]] {
		t.Errorf("high's assignment %+v (%v); want the freed GPU %s", a, err, gpuOf[gone[0]])
	}
	said := ""
	harness.Eventually(t, 30*time.Second, "the Preempting event on high", func() error {
		evs, err := e.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=high"})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.Reason == "Preempting" {
				said = ev.Message
				return nil
			}
		}
		return fmt.Errorf("not yet among %d events", len(evs.Items))
	})
	t.Logf("high (1 GPU, 100%% memory) preempted %v on %s and ran %s after its create: %s", gone, gpuOf[gone[0]], took.Round(time.Millisecond), said)

	// No preemption helps a pod bigger than any GPU: nothing is evicted.
	huge := pinned("huge", "e2e-high", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": fmt.Sprint(4 * inv.GPUs[0].MemoryMiB)}, nil)
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, huge, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "huge refused by the extender", func() error {
		evs, err := e.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=huge"})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.Reason == "FilteredNodes" || ev.Reason == "FailedScheduling" {
				return nil
			}
		}
		return fmt.Errorf("no scheduling event yet")
	})
	time.Sleep(5 * time.Second) // past the leader's 2 s turn, twice
	if now := running(); !slices.Equal(now, left) {
		t.Errorf("a pod no preemption helps evicted %v", diff(left, now))
	}
	t.Logf("huge (%d MiB, more than any GPU) stays Pending and evicts nothing", 4*inv.GPUs[0].MemoryMiB)
}

func diff(before, after []string) []string {
	var out []string
	for _, b := range before {
		if !slices.Contains(after, b) {
			out = append(out, b)
		}
	}
	return out
}
