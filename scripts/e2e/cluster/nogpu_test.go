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

	"github.com/vgpud/vgpud/scripts/harness"
)

const noGPUNS = "e2e-nogpu"

// noGPUNode takes the GPU label off every node, as a GPU pool scaled to
// zero: no vgpud replica runs, so nothing answers the webhook. GPU pods
// created as a tenant must still be admitted (none refused), made
// placeable by the vgpud-gpu-pods policy, wait Pending as Unschedulable
// for nvidia.com/gpu (what a cluster autoscaler acts on), and be placed
// once a node is labelled again.
func noGPUNode(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	newTenant(t, e, noGPUNS)
	kube := e.impersonate(t, "system:serviceaccount:"+noGPUNS+":tenant", nil)
	before := map[string]*corev1.Pod{}
	for _, n := range nodes {
		p, err := e.vgpudPod(n)
		if err != nil {
			t.Fatal(err)
		}
		before[n] = p
	}
	var putBack []func()
	for _, n := range nodes {
		putBack = append(putBack, e.takeGPULabel(t, n))
	}
	start := time.Now()
	harness.Eventually(t, 120*time.Second, "no vgpud replica and no GPU allocatable", func() error {
		l, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"})
		if err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d vgpud pods left", len(l.Items))
		}
		for _, n := range nodes {
			if got, _, _ := e.allocatable(n); got != 0 {
				return fmt.Errorf("node %s still has nvidia.com/gpu %d allocatable", n, got)
			}
		}
		return nil
	})
	t.Logf("GPU label off every node: no vgpud replica, no GPU allocatable after %v", time.Since(start).Round(time.Millisecond))

	shapes := []struct {
		name   string
		limits map[string]string
	}{
		{"mem-only", map[string]string{"nvidia.com/gpumem": "1000"}},
		{"whole-card", map[string]string{"nvidia.com/gpu": "1"}},
		{"complete", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "20"}},
	}
	var names []string
	for _, s := range shapes {
		if _, err := kube.CoreV1().Pods(noGPUNS).Create(ctx, gpuPod(s.name, s.limits, nil), metav1.CreateOptions{}); err != nil {
			t.Errorf("%s refused at create with no vgpud replica: %v", s.name, err)
		}
		names = append(names, s.name)
	}
	if t.Failed() {
		t.FailNow()
	}
	harness.Eventually(t, 90*time.Second, "each Pending, Unschedulable for nvidia.com/gpu", func() error {
		for _, name := range names {
			p, err := e.kube.CoreV1().Pods(noGPUNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Spec.SchedulerName != "vgpud-scheduler" || p.Status.Phase != corev1.PodPending {
				return fmt.Errorf("%s: scheduler %q, phase %s", name, p.Spec.SchedulerName, p.Status.Phase)
			}
			var cond *corev1.PodCondition
			for i := range p.Status.Conditions {
				if p.Status.Conditions[i].Type == corev1.PodScheduled {
					cond = &p.Status.Conditions[i]
				}
			}
			if cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != corev1.PodReasonUnschedulable || !strings.Contains(cond.Message, "Insufficient nvidia.com/gpu") {
				return fmt.Errorf("%s: PodScheduled %+v", name, cond)
			}
		}
		return nil
	})
	// What the policy made of them, with no webhook to ask.
	for name, want := range map[string][2]string{"mem-only": {"nvidia.com/gpu", "1"}, "whole-card": {"nvidia.com/gpucores", "100"}} {
		p, err := e.kube.CoreV1().Pods(noGPUNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		q, ok := p.Spec.Containers[0].Resources.Limits[corev1.ResourceName(want[0])]
		if !ok || q.String() != want[1] {
			t.Fatalf("%s: %s is %v, want %s from the vgpud-gpu-pods policy", name, want[0], p.Spec.Containers[0].Resources.Limits, want[1])
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				t.Logf("%s Pending: %s: %s", name, c.Reason, c.Message)
			}
		}
	}

	// A GPU node joins.
	joined := time.Now()
	putBack[0]()
	e.waitRunning(t, noGPUNS, names, 180*time.Second)
	t.Logf("a GPU node back -> all %d placed and Running in %v", len(names), time.Since(joined).Round(time.Millisecond))
	if env := e.containerEnv(t, noGPUNS, "whole-card"); env["CUDA_DEVICE_SM_LIMIT"] != "100" {
		t.Errorf("whole-card runs with CUDA_DEVICE_SM_LIMIT=%q, want 100", env["CUDA_DEVICE_SM_LIMIT"])
	}
	// The rest join: the cluster as it was, for the scenarios after.
	for _, f := range putBack[1:] {
		f()
	}
	for _, n := range nodes {
		harness.Eventually(t, 180*time.Second, n+" served again", func() error { return e.servedAgain(n, before[n]) })
	}
	harness.Eventually(t, 60*time.Second, "a leader", func() error { _, err := e.leader(); return err })
}
