//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/scripts/harness"
)

// removal takes vgpud out as docs/install-upgrade-and-uninstall.md says: first each node's
// runtime stops requiring vgpud's hook (the drop-in deleted, containerd
// restarted), then what was applied is deleted. Every node must still
// start containers, and a pod already running keeps running. vgpud is
// then put back (drop-in, kube-apiserver restarted, install) for what
// runs after.
func removal(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	cluster := func(args ...string) {
		t.Helper()
		out, err := exec.Command(e.scripts+"/cluster.sh", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("cluster.sh %v: %v\n%s", args, err, out)
		}
	}
	ns := "e2e-removal"
	e.namespace(t, ns, nil)
	plain := func(name, node string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node}, Containers: []corev1.Container{{
				Name: "c", Image: "vgpud.local/busybox:1", Command: []string{"sleep", "infinity"}}}},
		}
	}
	// A pod that runs through the removal.
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, plain("before", nodes[0]), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, ns, []string{"before"}, 60*time.Second)
	before, err := e.kube.CoreV1().Pods(ns).Get(ctx, "before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Put back, should the scenario stop before it installs vgpud again
	// itself (and unless nothing runs after: the compatibility
	// clusters): the drop-in on every node, a fresh kube-apiserver (in
	// case the params vgpud's fences read were lost,
	// docs/install-upgrade-and-uninstall.md) and vgpud.
	reinstalled := false
	t.Cleanup(func() {
		if e.last || reinstalled {
			return
		}
		for _, n := range nodes {
			if out, err := exec.Command(e.scripts+"/cluster.sh", "node-setup", nodeIndex(n), "install").CombinedOutput(); err != nil {
				t.Errorf("put the drop-in back on %s: %v\n%s", n, err, out)
			}
		}
		if out, err := exec.Command(e.scripts+"/cluster.sh", "restart-apiserver").CombinedOutput(); err != nil {
			t.Errorf("restart kube-apiserver: %v\n%s", err, out)
		}
		install := exec.Command(e.scripts + "/install.sh")
		install.Env = append(os.Environ(), "VGPUD_INSTALL=manifest")
		if out, err := install.CombinedOutput(); err != nil {
			t.Errorf("install vgpud again: %v\n%s", err, out)
		}
	})

	// 1. The node step: no runtime requires vgpud's hook any more.
	start := time.Now()
	for _, n := range nodes {
		cluster("node-setup", nodeIndex(n), "remove")
	}
	t.Logf("drop-in removed and containerd restarted on %d nodes in %v", len(nodes), time.Since(start).Round(time.Millisecond))
	// The preflight says so on every node, as an operator checks it
	// before deleting vgpud: the runtime no longer fails closed.
	for _, n := range nodes {
		vp, err := e.vgpudPod(n)
		if err != nil {
			t.Fatal(err)
		}
		// kubelet's connection to a containerd just restarted may still
		// be backing off: exec is retried until it reaches the pod.
		var out string
		harness.Eventually(t, 60*time.Second, "exec in "+vp.Name, func() error {
			out, err = e.kubectl("-n", system, "exec", vp.Name, "--", "vgpud", "preflight")
			if err != nil && strings.Contains(err.Error()+out, "unable to upgrade connection") {
				return fmt.Errorf("exec did not reach the pod: %v", err)
			}
			return nil
		})
		if err == nil || !strings.Contains(out, "FAILS OPEN") || !strings.Contains(out, "validator is off") {
			t.Fatalf("vgpud preflight on %s after the drop-in went: %v\n%s\nwant exit 1, FAILS OPEN, validator is off", n, err, out)
		}
	}
	t.Log("vgpud preflight says FAILS OPEN on every node once the drop-in is gone")

	// 2. What was installed, deleted: the Helm release where the chart
	// installed vgpud, else the manifest applied.
	start = time.Now()
	if release, err := e.kube.CoreV1().Secrets(system).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=vgpud,status=deployed"}); err == nil && len(release.Items) > 0 {
		uninstall := exec.Command("bash", "-c", `"$(scripts/helm.sh)" uninstall vgpud --namespace vgpud-system --wait --timeout 120s && kubectl delete namespace vgpud-system --wait=true --timeout=120s`)
		uninstall.Dir = filepath.Join(e.scripts, "..")
		uninstall.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
		if out, err := uninstall.CombinedOutput(); err != nil {
			t.Fatalf("helm uninstall: %v\n%s", err, out)
		}
	} else {
		// As docs/install-upgrade-and-uninstall.md removes it: all but
		// the policies kept for a reinstall.
		manifest := filepath.Join(filepath.Dir(e.kubeconfig), "vgpud.yaml")
		if out, err := e.kubectl("delete", "-f", manifest, "-l", "vgpud.io/keep!=true", "--wait=true", "--timeout=120s"); err != nil {
			t.Fatalf("kubectl delete -f %s: %v\n%s", manifest, err, out)
		}
	}
	harness.Eventually(t, 120*time.Second, "vgpud gone", func() error {
		if _, err := e.kube.CoreV1().Namespaces().Get(ctx, system, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("namespace %s still there", system)
		}
		return nil
	})
	t.Logf("vgpud and its namespace gone in %v", time.Since(start).Round(time.Millisecond))

	// 3. Every node starts containers, and the pod from before runs on.
	var names []string
	for i, n := range nodes {
		p := plain(fmt.Sprintf("after-%d", i), n)
		if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
	}
	took := e.waitRunning(t, ns, names, 90*time.Second)
	now, err := e.kube.CoreV1().Pods(ns).Get(ctx, "before", metav1.GetOptions{})
	if err != nil || now.UID != before.UID || now.Status.Phase != corev1.PodRunning || restarts(now) != restarts(before) {
		t.Fatalf("the pod running before the removal: %v, phase %s, %d restarts (was %d)", err, now.Status.Phase, restarts(now), restarts(before))
	}
	t.Logf("after removal: a new pod runs on each of %d nodes (%v), and the pod from before runs on without a restart", len(nodes), took.Round(time.Millisecond))

	// What stays: the two policies that keep the apiserver resolving
	// vgpud's params (kubernetes/kubernetes#130887), and nothing else
	// of vgpud's cluster-scoped admission objects.
	keep, err := e.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{LabelSelector: "vgpud.io/keep=true"})
	if err != nil || len(keep.Items) != 2 {
		t.Fatalf("after removal, the kept bindings: %v (%v); want vgpud-keep-lease-params and vgpud-keep-configmap-params", keep, err)
	}
	if e.last {
		return
	}
	// 4. Installed again on the same kube-apiserver, never restarted:
	// the fences that read the Lease and the ConfigMap as params hold.
	start = time.Now()
	for _, n := range nodes {
		cluster("node-setup", nodeIndex(n), "install")
	}
	install := exec.Command(e.scripts + "/install.sh")
	install.Env = append(os.Environ(), "VGPUD_INSTALL=manifest", "KUBECONFIG="+e.kubeconfig)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("install vgpud again: %v\n%s", err, out)
	}
	reinstalled = true
	t.Logf("installed again, kube-apiserver not restarted: serving in %v", time.Since(start).Round(time.Millisecond))
	again := e.installed(t)
	// The Lease as a param (vgpud-own-writes): a replica that does not
	// hold it may not label itself leader.
	leader, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	other := e.otherReplica(t, leader, again, leader.Spec.NodeName)
	_, err = e.asReplica(t, other).CoreV1().Pods(system).Patch(ctx, other.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"vgpud.io/role":"leader"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil || !strings.Contains(err.Error(), "only the replica holding the vgpud-leader Lease labels a pod leader") {
		t.Fatalf("after the reinstall, replica %s labelling itself leader: %v; want vgpud-own-writes to refuse it by the Lease", other.Name, err)
	}
	// The ConfigMap as a param (vgpud-lease), and the Lease's holder.
	leaseWriters(t, e, again)
	t.Log("after the reinstall the fences that read the Lease and the ConfigMap hold: the apiserver still resolves both params")
}
