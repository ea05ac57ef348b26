//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/hamirecord"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

const (
	hamiNS = "e2e-hami"
	// hamiScheduler is the identity the manifest's vgpud-hami-records
	// policy lets write HAMi's record: HAMi's scheduler, which wrote it
	// on the pods it placed before vgpud came.
	hamiScheduler = "system:serviceaccount:kube-system:hami-scheduler"
)

// fromHAMi moves a node from HAMi without draining it: pods HAMi placed
// keep running there with HAMi's record of their GPUs, which vgpud
// books. vgpud's placements avoid their GPUs, use them once such a pod
// ends, and no one but HAMi's scheduler can forge such a record.
func fromHAMi(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	// The node with the fewest GPUs (vgpud-node-3's four L4s).
	node, gpus := "", []protocol.GPU(nil)
	for _, n := range nodes {
		obj, err := e.kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		inv, err := protocol.DecodeInventory(obj.Annotations[wellknown.AnnotationGPUs])
		if err != nil {
			t.Fatal(err)
		}
		if node == "" || len(inv.GPUs) < len(gpus) {
			node, gpus = n, inv.GPUs
		}
	}
	if len(gpus) < 4 {
		t.Skipf("the scenario needs a node with 4 GPUs; the fewest is %d on %s", len(gpus), node)
	}
	e.namespace(t, hamiNS, nil)
	asTenant := newTenant(t, e, hamiNS+"-tenant")

	// HAMi's scheduler, as the apiserver knows it: it patches pods.
	rbac := e.kube.RbacV1()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-hami-scheduler"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "patch"}}}}
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{}) })
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-hami-scheduler"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "kube-system", Name: "hami-scheduler"}}}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	hami := e.impersonate(t, hamiScheduler, nil)

	// Two pods HAMi placed, as its scheduler left them: hami-a holds GPU 0
	// whole and all but 3000 MiB of GPU 1, hami-b GPU 2 whole.
	whole := func(g protocol.GPU) string { return fmt.Sprintf("%s,NVIDIA,%d,100:", g.UUID, g.MemoryMiB) }
	records := map[string]string{
		"hami-a": whole(gpus[0]) + ";" + fmt.Sprintf("%s,NVIDIA,%d,30:", gpus[1].UUID, gpus[1].MemoryMiB-3000) + ";",
		"hami-b": whole(gpus[2]) + ";;",
	}
	for _, name := range []string{"hami-a", "hami-b"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			NodeName: node, SchedulerName: "hami-scheduler", TerminationGracePeriodSeconds: new(int64(1)),
			Containers: []corev1.Container{{Name: "train", Image: "vgpud.local/busybox:1", Command: []string{"sleep", "3600"}},
				// A CUDA image (NVIDIA_VISIBLE_DEVICES=all in its config)
				// in a container that asks no GPU: HAMi gave it none.
				{Name: "logger", Image: "vgpud.local/cuda-like:1", Command: []string{"sleep", "3600"}}}}}
		if _, err := e.kube.CoreV1().Pods(hamiNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q,"hami.io/bind-phase":"success"}}}`,
			hamirecord.AnnotationHAMiNode, node, hamirecord.AnnotationHAMiAllocated, records[name])
		// Anyone else is refused, the cluster's admin too.
		_, err := e.kube.CoreV1().Pods(hamiNS).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err == nil || harness.Contains(err.Error(), "ValidatingAdmissionPolicy 'vgpud-hami-records'", "only HAMi's scheduler") != nil {
			t.Fatalf("HAMi's record written by the admin: %v", err)
		}
		if _, err := hami.CoreV1().Pods(hamiNS).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("HAMi's scheduler records %s: %v", name, err)
		}
	}
	e.waitRunning(t, hamiNS, []string{"hami-a", "hami-b"}, 60*time.Second)
	// HAMi's exemption covers the containers HAMi gave GPUs, no more.
	if out, err := e.kubectl("-n", hamiNS, "exec", "hami-a", "-c", "logger", "--", "sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES"); err != nil || strings.TrimSpace(out) != "void" {
		t.Fatalf("hami-a's logger, which asks no GPU, sees NVIDIA_VISIBLE_DEVICES=%q (%v), want void", strings.TrimSpace(out), err)
	}

	// A tenant cannot forge such a record to take GPUs for nothing.
	forged := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: forged, annotations: {%s: %q, %s: %s}}
spec: {containers: [{name: main, image: vgpud.local/busybox:1, command: [sleep, "3600"]}]}
`, hamirecord.AnnotationHAMiAllocated, whole(gpus[3])+";", hamirecord.AnnotationHAMiNode, node)
	if out, err := asTenant(forged, "apply", "-f", "-"); err == nil || harness.Contains(out, "vgpud-hami-records", hamirecord.AnnotationHAMiAllocated) != nil {
		t.Fatalf("a tenant's forged HAMi record: %v %s", err, out)
	} else {
		t.Logf("forged record refused: %s", lastLine(out))
	}
	// Nor pass one off as absent (the policy once compared values, with
	// "<absent>" standing for none).
	absent := strings.Replace(forged, fmt.Sprintf("%q", whole(gpus[3])+";"), `"<absent>"`, 1)
	if absent == forged {
		t.Fatal("no record to replace in the forged pod")
	}
	if out, err := asTenant(absent, "apply", "-f", "-"); err == nil || harness.Contains(out, "vgpud-hami-records") != nil {
		t.Fatalf("a tenant's record of \"<absent>\": %v %s", err, out)
	}

	// The leader books them (its metrics), before any pod asks.
	leader, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the leader books HAMi's pods", func() error {
		raw, err := e.scrape(leader)
		if err != nil {
			return err
		}
		mem, _, err := harness.MetricSums(strings.NewReader(raw), "vgpud_gpu_allocated_memory_bytes", func(l map[string]string) string {
			if l["node"] != node {
				return ""
			}
			return l["uuid"]
		})
		if err != nil {
			return err
		}
		for i, want := range []int64{gpus[0].MemoryMiB, gpus[1].MemoryMiB - 3000, gpus[2].MemoryMiB, 0} {
			if got := int64(mem[gpus[i].UUID]) >> 20; got != want {
				return fmt.Errorf("GPU %d (%s): %d MiB allocated, want %d", i, gpus[i].UUID, got, want)
			}
		}
		return nil
	})

	// Pods that each need almost a whole GPU, pinned to the node: one per
	// GPU HAMi left free runs there, the next waits.
	big := gpus[3].MemoryMiB - 2000
	var free, names []string
	for _, g := range gpus[3:] {
		free = append(free, g.UUID)
	}
	for i := range len(free) + 1 {
		p := gpuPod(fmt.Sprintf("after-hami-%d", i), map[string]string{"nvidia.com/gpumem": fmt.Sprint(big)}, nil)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		if _, err := e.kube.CoreV1().Pods(hamiNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
	}
	waiting := ""
	harness.Eventually(t, 60*time.Second, fmt.Sprintf("%d pods on the GPUs HAMi left free, one waiting", len(free)), func() error {
		var on []string
		waiting = ""
		for _, n := range names {
			p, err := e.kube.CoreV1().Pods(hamiNS).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning {
				if waiting != "" {
					return fmt.Errorf("%s and %s both not running", waiting, n)
				}
				waiting = n
				continue
			}
			a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
			if err != nil {
				return err
			}
			on = append(on, a.Containers[0].GPUs[0].UUID)
		}
		slices.Sort(on)
		if !slices.Equal(on, free) || waiting == "" {
			return fmt.Errorf("running on %v (want %v), waiting %q", on, free, waiting)
		}
		return nil
	})
	// It waits for what HAMi's pods hold: the 3000 MiB they left on GPU 1
	// is the most free there.
	harness.Eventually(t, 30*time.Second, waiting+"'s FilteredNodes event", func() error {
		return e.eventSays(hamiNS, waiting, "insufficient gpumem", "largest free 3000 MiB")
	})

	// kubectl vgpud shows what HAMi's pods hold.
	table := e.kubectlVgpud(t)
	if err := harness.Contains(table, hamiNS+"/hami-a", hamiNS+"/hami-b", "BOOKED FROM HAMI'S RECORD"); err != nil {
		t.Fatalf("kubectl vgpud: %v", err)
	}
	// Each record booked is listed with its pod's age, for an audit.
	if !regexp.MustCompile(`(?m)^` + hamiNS + `/hami-a\s+` + node + `\s+\d+[sm]\s+\S+Z\s+` + gpus[0].UUID).MatchString(table) {
		t.Fatalf("kubectl vgpud lists no audit row for hami-a:\n%s", table)
	}
	t.Logf("kubectl vgpud, HAMi's pods beside vgpud's:\n%s", table)

	// HAMi's pod ends: its GPU goes to the pod waiting.
	start := time.Now()
	if err := e.kube.CoreV1().Pods(hamiNS).Delete(ctx, "hami-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, hamiNS, []string{waiting}, 90*time.Second)
	p, err := e.kube.CoreV1().Pods(hamiNS).Get(ctx, waiting, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
	if err != nil || a.Containers[0].GPUs[0].UUID != gpus[2].UUID {
		t.Fatalf("%s placed on %+v (%v); want GPU 2, %s, which hami-b held", waiting, a, err, gpus[2].UUID)
	}
	t.Logf("hami-b deleted -> %s Running on its GPU in %s", waiting, time.Since(start).Round(time.Millisecond))
	hamiWidened(t, e, node, gpus[1], asTenant)
}

// hamiWidened is #50 item 6: a container HAMi gave a GPU keeps exactly
// the GPUs HAMi's record names. Its tenant's ConfigMap, read through
// envFrom, sets NVIDIA_VISIBLE_DEVICES=all: the runtime hook refuses the
// container, saying what reaches beyond the record; the variable taken
// out, the container starts.
func hamiWidened(t *testing.T, e env, node string, gpu protocol.GPU, asTenant func(string, ...string) (string, error)) {
	ctx := context.Background()
	ns := hamiNS + "-tenant"
	cm := func(data string) {
		t.Helper()
		out, err := asTenant("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: gpu-env}\ndata: "+data+"\n", "apply", "-f", "-")
		if err != nil {
			t.Fatalf("the tenant's ConfigMap: %v: %s", err, out)
		}
	}
	// HAMi's device plugin gave its containers the GPU resource, which
	// vgpud's admission keeps from any other scheduler's pod now; the
	// hook holds to HAMi's record a container that asks any device
	// resource, so it asks one the node is patched to have.
	const dongle = "example.com/dongle"
	patch := func(op string) {
		t.Helper()
		p := fmt.Sprintf(`[{"op":%q,"path":"/status/capacity/example.com~1dongle"%s}]`, op, map[string]string{"add": `,"value":"4"`}[op])
		if _, err := e.kube.CoreV1().Nodes().Patch(ctx, node, types.JSONPatchType, []byte(p), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("%s %s on %s: %v", op, dongle, node, err)
		}
	}
	patch("add")
	t.Cleanup(func() { patch("remove") })
	// The ConfigMap comes after HAMi's record: until then the container
	// waits for it, and the hook judges it as a container HAMi placed.
	one := corev1.ResourceList{dongle: resource.MustParse("1")}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hami-c"}, Spec: corev1.PodSpec{
		NodeName: node, SchedulerName: "hami-scheduler", TerminationGracePeriodSeconds: new(int64(1)),
		Containers: []corev1.Container{{Name: "train", Image: "vgpud.local/busybox:1", Command: []string{"sleep", "3600"},
			Resources: corev1.ResourceRequirements{Limits: one, Requests: one},
			EnvFrom:   []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gpu-env"}}}}}}}}
	harness.Eventually(t, 30*time.Second, node+" allocatable "+dongle, func() error {
		n, err := e.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if q := n.Status.Allocatable[dongle]; q.Value() < 1 {
			return fmt.Errorf("allocatable %v", n.Status.Allocatable)
		}
		return nil
	})
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.kube.CoreV1().Pods(ns).Delete(context.Background(), "hami-c", metav1.DeleteOptions{}) })
	record := fmt.Sprintf("%s,NVIDIA,1000,10:;", gpu.UUID)
	rec := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q,"hami.io/bind-phase":"success"}}}`,
		hamirecord.AnnotationHAMiNode, node, hamirecord.AnnotationHAMiAllocated, record)
	if _, err := e.impersonate(t, hamiScheduler, nil).CoreV1().Pods(ns).Patch(ctx, "hami-c", types.MergePatchType, []byte(rec), metav1.PatchOptions{}); err != nil {
		t.Fatalf("HAMi's scheduler records hami-c: %v", err)
	}
	cm("{NVIDIA_VISIBLE_DEVICES: all, EPOCHS: '3'}")
	harness.Eventually(t, 90*time.Second, "hami-c's train refused: its env reaches beyond HAMi's record", func() error {
		got, err := e.kube.CoreV1().Pods(ns).Get(ctx, "hami-c", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cs := range got.Status.ContainerStatuses {
			if cs.State.Running != nil {
				t.Fatalf("hami-c's train runs with NVIDIA_VISIBLE_DEVICES=all from its ConfigMap")
			}
			if w := cs.State.Waiting; w != nil {
				return harness.Contains(w.Message, "beyond HAMi's record", gpu.UUID, "env NVIDIA_VISIBLE_DEVICES=all")
			}
		}
		return fmt.Errorf("no container status yet")
	})
	cm("{EPOCHS: '3'}")
	e.waitRunning(t, ns, []string{"hami-c"}, 150*time.Second)
	t.Logf("hami-c refused while its ConfigMap set NVIDIA_VISIBLE_DEVICES=all beyond HAMi's record (%s), running once it did not", gpu.UUID)
}
