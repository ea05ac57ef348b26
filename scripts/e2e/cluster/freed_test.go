//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// freedGPU fills every GPU of the last node with a pod holding all its
// memory, leaves one more pod waiting (kube-scheduler has been told no by
// the extender), then deletes one holder: the waiting pod must run, on the
// GPU just freed. The time from the delete to Running is what a team
// feels when a GPU frees; make bench reports it against its target.
func freedGPU(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	ns := "e2e-freed"
	e.namespace(t, ns, nil)
	node := nodes[len(nodes)-1]
	n, err := e.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := protocol.DecodeInventory(n.Annotations[wellknown.AnnotationGPUs])
	if err != nil {
		t.Fatal(err)
	}
	whole := func(name string) *corev1.Pod {
		// Every GPU of a mock machine has the same memory.
		p := gpuPod(name, map[string]string{"nvidia.com/gpumem": strconv.FormatInt(inv.GPUs[0].MemoryMiB, 10)}, nil)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		return p
	}
	var holders []string
	for i := range inv.GPUs {
		p := whole(fmt.Sprintf("holder-%d", i))
		if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		holders = append(holders, p.Name)
	}
	e.waitRunning(t, ns, holders, 120*time.Second)
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, whole("waiting"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 60*time.Second, "waiting pod refused by the extender", func() error {
		evs, err := e.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=waiting,reason=FailedScheduling"})
		if err != nil {
			return err
		}
		if len(evs.Items) == 0 {
			return fmt.Errorf("no FailedScheduling event yet")
		}
		return nil
	})
	// A pod that has waited a while, past kube-scheduler's first backoffs.
	time.Sleep(5 * time.Second)
	victim, err := e.kube.CoreV1().Pods(ns).Get(ctx, holders[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	freed, err := protocol.DecodeAssignment(victim.Annotations[wellknown.AnnotationAssignment])
	if err != nil {
		t.Fatal(err)
	}
	grace := int64(0)
	if err := e.kube.CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	e.waitRunning(t, ns, []string{"waiting"}, 90*time.Second)
	took := time.Since(deleted)
	p, err := e.kube.CoreV1().Pods(ns).Get(ctx, "waiting", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.Containers[0].GPUs[0].UUID, freed.Containers[0].GPUs[0].UUID; got != want {
		t.Errorf("waiting pod got %s, not the freed %s", got, want)
	}
	t.Logf("GPU freed -> waiting pod Running: %v (on %s)", took.Round(time.Millisecond), node)
}
