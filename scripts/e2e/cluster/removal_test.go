//go:build e2e

package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// removal takes vgpud out as docs/install-upgrade-and-uninstall.md says,
// with no step on a node: first every node's runtime is reverted (the
// chart's pre-delete hook, or node-revert.yaml by kubectl: the drop-in
// deleted, containerd restarted, one node at a time), then the rest is
// deleted. Every node must then start containers, even one that names
// vgpud as a required NRI plugin, and a pod already running keeps
// running. vgpud is then installed again, on the same kube-apiserver,
// and sets every node up again itself.
func removal(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
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
	for _, n := range nodes {
		if node, err := e.kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); err != nil || node.Labels[wellknown.LabelNodeSetup] != wellknown.NodeSetupDone {
			t.Fatalf("before the removal, node %s: %v, %s=%q; want %s", n, err, wellknown.LabelNodeSetup, node.Labels[wellknown.LabelNodeSetup], wellknown.NodeSetupDone)
		}
	}

	// Put back, should the scenario stop before it installs vgpud again
	// itself (and unless nothing runs after: the compatibility
	// clusters): a fresh kube-apiserver (in case the params vgpud's
	// fences read were lost, docs/install-upgrade-and-uninstall.md) and
	// vgpud, whose init containers set the nodes up again.
	reinstalled := false
	t.Cleanup(func() {
		if e.last || reinstalled {
			return
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

	// 1 and 2. Every node reverted first, then what was installed
	// deleted: the Helm release where the chart installed vgpud (its
	// pre-delete hook reverts the nodes), else the manifest applied,
	// after node-revert.yaml's Job says every node is reverted.
	start := time.Now()
	root := filepath.Join(e.scripts, "..")
	if release, err := e.kube.CoreV1().Secrets(system).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=vgpud,status=deployed"}); err == nil && len(release.Items) > 0 {
		uninstall := exec.Command("bash", "-c", `"$(scripts/helm.sh)" uninstall vgpud --namespace vgpud-system --wait --timeout 300s && kubectl delete namespace vgpud-system --wait=true --timeout=120s`)
		uninstall.Dir = root
		uninstall.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
		if out, err := uninstall.CombinedOutput(); err != nil {
			t.Fatalf("helm uninstall: %v\n%s", err, out)
		}
	} else {
		// As docs/install-upgrade-and-uninstall.md removes it.
		dir := filepath.Dir(e.kubeconfig)
		revert, manifest := filepath.Join(dir, "node-revert.yaml"), filepath.Join(dir, "vgpud.yaml")
		for _, args := range [][]string{
			{"apply", "-f", revert},
			{"-n", system, "wait", "--for=condition=Complete", "job/vgpud-node-revert", "--timeout=300s"},
			{"delete", "-f", revert, "--wait=true", "--timeout=120s"},
			{"delete", "-f", manifest, "-l", "vgpud.io/keep!=true", "--wait=true", "--timeout=120s"},
		} {
			if out, err := e.kubectl(args...); err != nil {
				// Every pod the Job ran, and how each ended.
				logs, _ := e.kubectl("-n", system, "logs", "-l", "batch.kubernetes.io/job-name=vgpud-node-revert", "--prefix", "--tail=50")
				ended, _ := e.kubectl("-n", system, "get", "pods", "-l", "batch.kubernetes.io/job-name=vgpud-node-revert", "-o",
					`jsonpath={range .items[*]}{.metadata.name} on {.spec.nodeName}: {.status.containerStatuses[0].state}{"\n"}{end}`)
				job, _ := e.kubectl("-n", system, "get", "job", "vgpud-node-revert", "-o", "jsonpath={.status}")
				t.Fatalf("kubectl %v: %v\n%s\nthe revert Job: %s\nits pods:\n%s\ntheir logs:\n%s", args, err, out, job, ended, logs)
			}
		}
	}
	harness.Eventually(t, 120*time.Second, "vgpud gone", func() error {
		if _, err := e.kube.CoreV1().Namespaces().Get(ctx, system, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("namespace %s still there", system)
		}
		return nil
	})
	t.Logf("every node reverted, then vgpud and its namespace gone, in %v", time.Since(start).Round(time.Millisecond))
	// On every node: no label, no drop-in on the host.
	for _, n := range nodes {
		node, err := e.kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range append(wellknown.NodeReportLabels(), wellknown.LabelNodeSetup) {
			if v, ok := node.Labels[k]; ok {
				t.Errorf("after removal node %s still says %s=%s", n, k, v)
			}
		}
		if _, err := os.Stat(dropInOnHost(e, n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after removal node %s's drop-in %s: %v, want it gone", n, dropInOnHost(e, n), err)
		}
	}

	// 3. Every node starts containers, and the pod from before runs on.
	var names []string
	for i, n := range nodes {
		p := plain(fmt.Sprintf("after-%d", i), n)
		if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
	}
	// One that names vgpud as a required NRI plugin, as admission marked
	// what could reach a GPU: it starts only where the runtime no longer
	// requires vgpud's hook, which is gone.
	for i, n := range nodes {
		p := plain(fmt.Sprintf("marked-%d", i), n)
		p.Annotations = map[string]string{wellknown.AnnotationRequiredPlugins: wellknown.RequiredPluginsVgpud}
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
	t.Logf("after removal: a new pod, and one requiring vgpud's hook, run on each of %d nodes (%v), and the pod from before runs on without a restart", len(nodes), took.Round(time.Millisecond))

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
	// the fences that read the Lease and the ConfigMap hold, and every
	// node is set up again by vgpud's own init containers.
	start = time.Now()
	install := exec.Command(e.scripts + "/install.sh")
	install.Env = append(os.Environ(), "VGPUD_INSTALL=manifest", "KUBECONFIG="+e.kubeconfig)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("install vgpud again: %v\n%s", err, out)
	}
	reinstalled = true
	t.Logf("installed again, kube-apiserver not restarted: serving in %v", time.Since(start).Round(time.Millisecond))
	for _, n := range nodes {
		if node, err := e.kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); err != nil || node.Labels[wellknown.LabelNodeSetup] != wellknown.NodeSetupDone {
			t.Errorf("after the reinstall node %s: %v, %s=%q; want %s", n, err, wellknown.LabelNodeSetup, node.Labels[wellknown.LabelNodeSetup], wellknown.NodeSetupDone)
		}
		if _, err := os.Stat(dropInOnHost(e, n)); err != nil {
			t.Errorf("after the reinstall node %s's drop-in: %v", n, err)
		}
	}
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

// dropInOnHost is where node's vgpud drop-in lies on this machine
// (scripts/cluster.sh: node 1's directory is the cluster's, node K's
// nodeK/ in it).
func dropInOnHost(e env, node string) string {
	dir := filepath.Dir(e.kubeconfig)
	if k := nodeIndex(node); k != "1" {
		dir = filepath.Join(dir, "node"+k)
	}
	return filepath.Join(dir, "etc-containerd", "conf.d", "vgpud.toml")
}
