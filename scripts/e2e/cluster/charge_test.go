//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/containerenv"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// slotCharge is the squatting attack and the core quota dodge, as a
// tenant with edit in ns: a 1 MiB pod that names no gpucores is charged
// a slot's share of its GPU in memory and cores, and its container is
// limited to those cores, so a small quota buys a few slots, not one on
// every GPU, and a gpucores quota bounds pods that leave gpucores out.
func slotCharge(t *testing.T, e env, ns string) {
	ctx := context.Background()
	pods := e.kube.CoreV1().Pods(ns)
	e.emptyNamespace(t, ns)
	setQuota := func(mem int64, cores int) {
		t.Helper()
		patch := fmt.Sprintf(`{"spec":{"hard":{"requests.nvidia.com/gpumem":"%d","requests.nvidia.com/gpucores":"%d"}}}`, mem, cores)
		_, err := e.kube.CoreV1().ResourceQuotas(ns).Patch(ctx, "gpu", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			_, err = e.kube.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
				"requests.nvidia.com/gpumem": *resource.NewQuantity(mem, resource.DecimalSI), "requests.nvidia.com/gpucores": *resource.NewQuantity(int64(cores), resource.DecimalSI)}}}, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The scenarios after this one place pods here without a quota.
	t.Cleanup(func() {
		_ = e.kube.CoreV1().ResourceQuotas(ns).Delete(context.Background(), "gpu", metav1.DeleteOptions{})
		_ = pods.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	kube := e.impersonate(t, "system:serviceaccount:"+ns+":tenant", nil)
	squat := func(name string) {
		t.Helper()
		p := gpuPod(name, map[string]string{"nvidia.com/gpumem": "1"}, map[string]string{wellknown.AnnotationUseGPUType: "A100"})
		// Admission counts what the pod names (1 MiB, no cores) and
		// lets it by; bind charges the slot.
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s refused at create: %v", name, err)
		}
	}

	// Room for one slot of a mock A100 in memory, not two.
	setQuota(6000, 100)
	squat("squat-0")
	e.waitRunning(t, ns, []string{"squat-0"}, 60*time.Second)
	p, err := pods.Get(ctx, "squat-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
	if err != nil {
		t.Fatal(err)
	}
	g := e.inventoryGPU(t, p.Spec.NodeName, a.Containers[0].GPUs[0].UUID)
	slot := podmodel.SlotShare(g)
	if 6000 < slot.MemMiB || 6000 >= 2*slot.MemMiB {
		t.Fatalf("the scenario wants a GPU whose slot is 3001..6000 MiB; %s has %d (%d MiB split %d)", g.UUID, slot.MemMiB, g.MemoryMiB, g.Split)
	}
	env := e.containerEnv(t, ns, "squat-0")
	if want := fmt.Sprint(slot.Cores); env[containerenv.EnvSMLimit] != want || a.Containers[0].GPUs[0].Cores != slot.Cores {
		t.Fatalf("a container that names no gpucores got %s=%q (assignment %d cores), want a slot's share, %s", containerenv.EnvSMLimit, env[containerenv.EnvSMLimit], a.Containers[0].GPUs[0].Cores, want)
	}
	t.Logf("squat-0 asks 1 MiB and no cores: runs with %s=%s, charged %d MiB (%d MiB split %d)", containerenv.EnvSMLimit, env[containerenv.EnvSMLimit], slot.MemMiB, g.MemoryMiB, g.Split)

	squat("squat-1")
	memMsg := fmt.Sprintf("gpumem quota 6000 MiB, in use %d, this pod is charged %d", slot.MemMiB, slot.MemMiB)
	harness.Eventually(t, 60*time.Second, "bind refuses squat-1 for memory", func() error { return e.eventSays(ns, "squat-1", memMsg) })
	t.Logf("squat-1 refused at bind: %s", memMsg)

	// Memory to spare; cores for one slot, not two: leaving gpucores out
	// does not dodge the quota.
	grace := int64(0)
	if err := pods.Delete(ctx, "squat-1", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	cores := slot.Cores + slot.Cores/2
	setQuota(1<<20, cores)
	squat("squat-2")
	coreMsg := fmt.Sprintf("gpucores quota %d, in use %d, this pod is charged %d", cores, slot.Cores, slot.Cores)
	harness.Eventually(t, 60*time.Second, "bind refuses squat-2 for cores", func() error { return e.eventSays(ns, "squat-2", coreMsg) })
	if p, err := pods.Get(ctx, "squat-2", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		t.Fatalf("squat-2 bound past the gpucores quota: %v", err)
	}
	t.Logf("squat-2 refused at bind: %s", coreMsg)

	// Counted as the tenant's refusals, not vgpud's failures: they never
	// page (VgpudBindsFailing).
	harness.Eventually(t, 30*time.Second, "the leader counts the quota refusals", func() error {
		leader, err := e.leader()
		if err != nil {
			return err
		}
		raw, err := e.scrape(leader)
		if err != nil {
			return err
		}
		binds, _, err := harness.MetricSums(strings.NewReader(raw), "vgpud_binds_total", func(l map[string]string) string { return l["outcome"] + "/" + l["reason"] })
		if err != nil {
			return err
		}
		if binds["refused/quota"] < 2 {
			return fmt.Errorf("vgpud_binds_total by outcome/reason: %v; want refused/quota at least 2", binds)
		}
		t.Logf("vgpud_binds_total{outcome=\"refused\",reason=\"quota\"} %v on %s", binds["refused/quota"], leader.Name)
		return nil
	})
}

// emptyNamespace deletes ns's pods and waits until they are gone.
func (e env) emptyNamespace(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	pods := e.kube.CoreV1().Pods(ns)
	_ = pods.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	harness.Eventually(t, 60*time.Second, "namespace "+ns+" empty", func() error {
		l, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) > 0 {
			return fmt.Errorf("%d pods (%v)", len(l.Items), err)
		}
		return nil
	})
}

// inventory is node's vgpud inventory as published now.
func (e env) inventory(t *testing.T, node string) protocol.Inventory {
	t.Helper()
	n, err := e.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := protocol.DecodeInventory(n.Annotations[wellknown.AnnotationGPUs])
	if err != nil {
		t.Fatalf("node %s inventory: %v", node, err)
	}
	return inv
}

// inventoryGPU is the GPU uuid of node's vgpud inventory.
func (e env) inventoryGPU(t *testing.T, node, uuid string) protocol.GPU {
	t.Helper()
	for _, g := range e.inventory(t, node).GPUs {
		if g.UUID == uuid {
			return g
		}
	}
	t.Fatalf("node %s has no GPU %s", node, uuid)
	return protocol.GPU{}
}

// wholeMemoryCharge is the quota dodge of #50 item 5, as a tenant with
// edit in ns: a slice of all a GPU's memory with gpucores 1 denies
// others the whole GPU, so it is charged every core, at admission and at
// bind; two such pods do not fit a quota of 150 cores.
func wholeMemoryCharge(t *testing.T, e env, ns string) {
	ctx := context.Background()
	pods := e.kube.CoreV1().Pods(ns)
	e.emptyNamespace(t, ns)
	quotas := e.kube.CoreV1().ResourceQuotas(ns)
	_ = quotas.Delete(ctx, "gpu", metav1.DeleteOptions{})
	if _, err := quotas.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
		"requests.nvidia.com/gpucores": *resource.NewQuantity(150, resource.DecimalSI)}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = quotas.Delete(context.Background(), "gpu", metav1.DeleteOptions{})
		_ = pods.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	kube := e.impersonate(t, "system:serviceaccount:"+ns+":tenant", nil)
	whole := func(name string) error {
		p := gpuPod(name, map[string]string{"nvidia.com/gpumem-percentage": "100", "nvidia.com/gpucores": "1"}, map[string]string{wellknown.AnnotationUseGPUType: "A100"})
		_, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	}
	// Admission waits for the quota's first status.
	harness.Eventually(t, 30*time.Second, "whole-mem-0 admitted under 150 cores", func() error { return whole("whole-mem-0") })
	e.waitRunning(t, ns, []string{"whole-mem-0"}, 60*time.Second)
	harness.Eventually(t, 30*time.Second, "whole-mem-1 refused: whole-mem-0 is charged every core", func() error {
		err := whole("whole-mem-1")
		if err == nil {
			t.Fatal("whole-mem-1 admitted beside a slice of a whole GPU's memory under 150 cores")
		}
		return harness.Contains(err.Error(), "gpucores quota 150, in use 100, this pod is charged 100", "all its memory")
	})
	t.Logf("whole-mem-1 (gpumem-percentage 100, gpucores 1) refused at create: charged 100 cores, as whole-mem-0 is")
}
