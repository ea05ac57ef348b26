//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// gpuCordon: an operator takes GPUs of one node out of new placements
// with kubectl annotate (vgpud.io/cordon, and HAMi's hami.io/device-cordon). A tenant's pod already on a
// cordoned GPU runs on; new pods go to the one GPU left, then wait while
// every GPU is cordoned, saying why, and are placed once it is lifted.
// Only whom RBAC grants the verb cordon on gpus.vgpud.io may change it:
// not a tenant, nor an admin of nodes without that verb.
func gpuCordon(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	const ns = "e2e-cordon"
	asTenant := newTenant(t, e, ns)
	e.idleGPUs(t)
	node := nodes[0]
	n, err := e.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := protocol.DecodeInventory(n.Annotations[wellknown.AnnotationGPUs])
	if err != nil || len(inv.GPUs) < 2 {
		t.Fatalf("node %s: %d GPUs, %v; the scenario needs two", node, len(inv.GPUs), err)
	}
	first, kept := inv.GPUs[0], inv.GPUs[len(inv.GPUs)-1]

	// The operator may patch nodes and cordon GPUs; the node admin only
	// patch nodes.
	patcher := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-node-patcher"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "patch"}}}}
	bindings := []*rbacv1.ClusterRoleBinding{
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-operator-patches"}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: patcher.Name},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: "e2e-gpu-operator"}, {Kind: "User", Name: "e2e-node-admin"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-operator-cordons"}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "vgpud-gpu-cordoner"},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: "e2e-gpu-operator"}}},
	}
	if _, err := e.kube.RbacV1().ClusterRoles().Create(ctx, patcher, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, b := range bindings {
		if _, err := e.kube.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = e.kubectl("annotate", "node", node, wellknown.AnnotationCordon+"-", wellknown.AnnotationCordonHAMi+"-")
		for _, b := range bindings {
			_ = e.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
		}
		_ = e.kube.RbacV1().ClusterRoles().Delete(context.Background(), patcher.Name, metav1.DeleteOptions{})
	})
	annotateKey := func(as, key, value string) (string, error) {
		arg := key + "=" + value
		if value == "" {
			arg = key + "-"
		}
		return e.kubectl("--as="+as, "annotate", "node", node, arg, "--overwrite")
	}
	annotate := func(as, value string) (string, error) { return annotateKey(as, wellknown.AnnotationCordon, value) }
	pinned := func(name string, annotations map[string]string) *corev1.Pod {
		p := gpuPod(name, map[string]string{"nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"}, annotations)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		return p
	}
	create := func(p *corev1.Pod) {
		t.Helper()
		if _, err := e.impersonate(t, "system:serviceaccount:"+ns+":tenant", nil).CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gpusOf := func(name string) []string {
		t.Helper()
		p, err := e.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var out []string
		for _, c := range a.Containers {
			for _, g := range c.GPUs {
				out = append(out, g.UUID)
			}
		}
		return out
	}

	// A pod on the first GPU before it is cordoned.
	create(pinned("before", map[string]string{wellknown.AnnotationUseGPUUUID: first.UUID}))
	e.waitRunning(t, ns, []string{"before"}, 90*time.Second)
	before, err := e.kube.CoreV1().Pods(ns).Get(ctx, "before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	out, err := asTenant("", "annotate", "node", node, wellknown.AnnotationCordon+"=0")
	// RBAC: edit reaches no node (kubectl's read of it is refused first).
	if err == nil || !strings.Contains(out, `User "system:serviceaccount:`+ns+`:tenant" cannot`) || !strings.Contains(out, `resource "nodes"`) {
		t.Fatalf("a tenant cordoned a GPU: %v %s", err, out)
	}
	out, err = annotate("e2e-node-admin", "0")
	if err == nil || !strings.Contains(out+err.Error(), "needs the verb cordon on gpus.vgpud.io") {
		t.Fatalf("an admin of nodes without the cordon verb cordoned a GPU: %v %s", err, out)
	}
	t.Logf("without the verb: %s", lastLine(err.Error()))
	if out, err := annotateKey("e2e-node-admin", wellknown.AnnotationCordonHAMi, first.UUID); err == nil || !strings.Contains(out+err.Error(), "needs the verb cordon") {
		t.Fatalf("HAMi's cordon changed without the verb: %v %s", err, out)
	}
	// A value that reads as "absent" to a careless comparison.
	if out, err := annotate("e2e-node-admin", "<absent>"); err == nil || !strings.Contains(out+err.Error(), "needs the verb cordon") {
		t.Fatalf("a cordon written as <absent> without the verb: %v %s", err, out)
	}
	out, err = annotate("e2e-gpu-operator", "all")
	if err == nil || !strings.Contains(out+err.Error(), "lists GPUs by UUID (GPU-...) or index") {
		t.Fatalf("a cordon that names no GPU was taken: %v %s", err, out)
	}
	// Every GPU but the last: the first by UUID, the others by index.
	entries := []string{first.UUID}
	for _, g := range inv.GPUs[1 : len(inv.GPUs)-1] {
		entries = append(entries, strconv.Itoa(g.Index))
	}
	if out, err := annotate("e2e-gpu-operator", strings.Join(entries, ",")); err != nil {
		t.Fatalf("the operator's cordon: %v %s", err, out)
	}
	leader, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`vgpud_gpu_cordoned{model=%q,node=%q,uuid=%q} 1`, first.Model, node, first.UUID)
	harness.Eventually(t, 30*time.Second, "the leader exports the cordon", func() error {
		m, err := e.scrape(leader)
		if err != nil {
			return err
		}
		return harness.Contains(m, want)
	})

	names := []string{"after-0", "after-1", "after-2"}
	for _, name := range names {
		create(pinned(name, nil))
	}
	e.waitRunning(t, ns, names, 90*time.Second)
	for _, name := range names {
		if got := gpusOf(name); len(got) != 1 || got[0] != kept.UUID {
			t.Errorf("%s placed on %v; only %s is not cordoned", name, got, kept.UUID)
		}
	}
	now, err := e.kube.CoreV1().Pods(ns).Get(ctx, "before", metav1.GetOptions{})
	if err != nil || now.UID != before.UID || now.Status.Phase != corev1.PodRunning || now.Annotations[wellknown.AnnotationAssignment] != before.Annotations[wellknown.AnnotationAssignment] {
		t.Errorf("the pod on the cordoned GPU was disturbed: %v", err)
	}
	s := e.inspect(t, node)
	for i, g := range s.GPUs {
		if g.Cordoned != (g.UUID != kept.UUID) {
			t.Errorf("vgpud inspect on %s: GPU %d cordoned %v", node, i, g.Cordoned)
		}
	}
	if view := e.kubectlVgpud(t, "--node", node); strings.Count(view, "cordoned") != len(inv.GPUs)-1 {
		t.Errorf("kubectl vgpud shows %d cordoned GPUs, want %d:\n%s", strings.Count(view, "cordoned"), len(inv.GPUs)-1, view)
	}

	// Every GPU cordoned, the last through HAMi's annotation: a new pod
	// waits, saying why; lifted, it runs.
	if out, err := annotateKey("e2e-gpu-operator", wellknown.AnnotationCordonHAMi, kept.UUID); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	harness.Eventually(t, 30*time.Second, "the leader sees every GPU cordoned", func() error {
		m, err := e.scrape(leader)
		if err != nil {
			return err
		}
		return harness.Contains(m, fmt.Sprintf(`vgpud_gpu_cordoned{model=%q,node=%q,uuid=%q} 1`, kept.Model, node, kept.UUID))
	})
	create(pinned("waits", nil))
	harness.Eventually(t, 60*time.Second, "waits refused for the cordon", func() error {
		return e.eventSays(ns, "waits", "cordoned")
	})
	if out, err := annotateKey("e2e-gpu-operator", wellknown.AnnotationCordonHAMi, ""); err != nil {
		t.Fatalf("lift the cordon: %v %s", err, out)
	}
	lifted := time.Now()
	e.waitRunning(t, ns, []string{"waits"}, 90*time.Second)
	t.Logf("a pod waiting on a cordon placed %v after it was lifted", time.Since(lifted).Round(time.Second))
}
