//go:build e2e

// Package cluster is the end-to-end suite on the real cluster of three
// nodes (scripts/cluster.sh) with vgpud installed from manifests/ (mock overlay):
// a real kube-apiserver calling the webhook, a real kube-scheduler calling
// the extender, a real kubelet calling the device plugin, real containers.
// Run through `make e2e`; the scenarios run in order, sharing the cluster.
package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/protocol/containerenv"
	"github.com/vgpud/vgpud/protocol/inspectv1"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/vgpud/vgpud/protocol"
)

const system = "vgpud-system"

type env struct {
	kubeconfig string
	scripts    string
	kube       kubernetes.Interface
	// last: nothing runs on this cluster after the scenario at hand, so
	// what it removes is not put back (the compatibility clusters).
	last bool
	// fullname names vgpud's objects: vgpud, or the chart's
	// fullnameOverride where VGPUD_FULLNAME says (scripts/e2e.sh).
	fullname string
}

func setup(t *testing.T) env {
	t.Helper()
	v := harness.Getenv(t, "make e2e", "KUBECONFIG", "VGPUD_SCRIPTS")
	fullname := os.Getenv("VGPUD_FULLNAME")
	if fullname == "" {
		fullname = "vgpud"
	}
	return env{kubeconfig: v[0], scripts: v[1], kube: harness.Client(t, v[0], 200), fullname: fullname}
}

// name is the name of vgpud's object with suffix ("" for the
// DaemonSet's, "-leader" for the Lease...).
func (e env) name(suffix string) string { return e.fullname + suffix }

// kubectl runs the real kubectl; the error carries its stderr.
func (e env) kubectl(args ...string) (string, error) {
	cmd := exec.Command("kubectl", args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.String(), nil
}

// namespace makes a fresh namespace, removed when the test ends.
func (e env) namespace(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	if err := e.namespaceGone(name); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 60*time.Second, "service account in "+name, func() error {
		_, err := e.kube.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	t.Cleanup(func() {
		if t.Failed() {
			e.dump(t, name)
		}
		grace := int64(0)
		_ = e.kube.CoreV1().Pods(name).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
		_ = e.kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// namespaceGone deletes namespace name and waits up to two minutes
// until it is gone.
func (e env) namespaceGone(name string) error {
	ctx := context.Background()
	_ = e.kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	err := harness.Poll(120*time.Second, func() error {
		if _, err := e.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s gone: not within 2m0s: %w", name, err)
	}
	return nil
}

// gpuPod is a busybox pod that prints its GPU env and sleeps.
func gpuPod(name string, limits map[string]string, annotations map[string]string) *corev1.Pod {
	l := corev1.ResourceList{}
	for k, v := range limits {
		l[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "main", Image: "vgpud.local/busybox:1", ImagePullPolicy: corev1.PullIfNotPresent,
				Command:   []string{"sh", "-c", "env | grep -E '^(NVIDIA_VISIBLE_DEVICES|CUDA_)' | sort; sleep 3600"},
				Resources: corev1.ResourceRequirements{Limits: l},
			}},
		},
	}
}

// containerEnv reads the env lines the pod printed.
func (e env) containerEnv(t *testing.T, ns, pod string) map[string]string {
	t.Helper()
	out := map[string]string{}
	harness.Eventually(t, 30*time.Second, "env of "+pod, func() error {
		raw, err := e.kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(context.Background())
		if err != nil {
			return err
		}
		for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				out[k] = v
			}
		}
		if out[containerenv.EnvVisibleDevices] == "" {
			return fmt.Errorf("no %s yet in %q", containerenv.EnvVisibleDevices, raw)
		}
		return nil
	})
	return out
}

// waitRunning waits for every named pod to run and returns how long it took.
func (e env) waitRunning(t *testing.T, ns string, names []string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	err := harness.Poll(timeout, func() error {
		pods, err := e.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		running := map[string]bool{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running[p.Name] = true
			}
		}
		var missing []string
		for _, n := range names {
			if !running[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not running: %v", missing)
		}
		return nil
	})
	if err != nil {
		e.dump(t, ns)
		t.Fatalf("%d pods Running in %s: not within %v: %v", len(names), ns, timeout, err)
	}
	return time.Since(start)
}

// leader returns the pod labelled leader, or an error unless exactly one is.
func (e env) leader() (*corev1.Pod, error) {
	pods, err := e.kube.CoreV1().Pods(system).List(context.Background(), metav1.ListOptions{LabelSelector: wellknown.LabelRole + "=" + wellknown.RoleLeader})
	if err != nil {
		return nil, err
	}
	if len(pods.Items) != 1 {
		return nil, fmt.Errorf("%d pods labelled leader", len(pods.Items))
	}
	return &pods.Items[0], nil
}

// vgpudPod returns the DaemonSet pod on node that is not terminating.
func (e env) vgpudPod(node string) (*corev1.Pod, error) {
	pods, err := e.kube.CoreV1().Pods(system).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=node", FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		return nil, err
	}
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			return &pods.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no vgpud pod on %s", node)
}

// inspect runs `vgpud inspect --json` in node's DaemonSet pod.
func (e env) inspect(t *testing.T, node string) inspectv1.NodeSnapshot {
	t.Helper()
	var s inspectv1.NodeSnapshot
	harness.Eventually(t, 30*time.Second, "vgpud inspect on "+node, func() error {
		p, err := e.vgpudPod(node)
		if err != nil {
			return err
		}
		out, err := e.kubectl("-n", system, "exec", p.Name, "--", "vgpud", "inspect", "--json")
		if err != nil {
			return err
		}
		return jsonUnmarshal(out, &s)
	})
	return s
}

// nodes lists the cluster's node names, sorted.
func (e env) nodes(t *testing.T) []string {
	t.Helper()
	list, err := e.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		t.Fatalf("nodes: %v %v", list, err)
	}
	var names []string
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return names
}

// nodeIndex is the number scripts/cluster.sh knows node by: vgpud-node is
// 1, vgpud-node-K is K.
func nodeIndex(node string) string {
	if _, k, ok := strings.Cut(node, "vgpud-node-"); ok {
		return k
	}
	return "1"
}

// allocatable is node's nvidia.com/gpu, and what its vgpud inventory says
// it should be (devices).
func (e env) allocatable(node string) (got, want int64, err error) {
	n, err := e.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return 0, 0, err
	}
	q := n.Status.Allocatable["nvidia.com/gpu"]
	inv, err := protocol.DecodeInventory(n.Annotations[wellknown.AnnotationGPUs])
	if err != nil {
		return q.Value(), 0, fmt.Errorf("node %s inventory: %w", node, err)
	}
	return q.Value(), devices(inv), nil
}

// devices is what kubelet should be told a node has: each healthy
// GPU's slices, and each MIG instance of a healthy GPU once, with each
// instance the node may make on demand.
func devices(inv protocol.Inventory) int64 {
	var n int64
	for _, g := range inv.GPUs {
		if g.Healthy {
			n += int64(g.Split)
		}
	}
	for _, g := range inv.MIG {
		if g.Healthy {
			n += int64(len(g.Instances) + len(g.Possible))
		}
	}
	return n
}

// advertising is nil when node advertises every slice of its inventory.
func (e env) advertising(node string) error {
	got, want, err := e.allocatable(node)
	if err != nil {
		return err
	}
	if got != want || want == 0 {
		return fmt.Errorf("node %s: allocatable nvidia.com/gpu %d, inventory %d", node, got, want)
	}
	return nil
}

// dump logs what explains a failure: the namespace's pods and events, and
// the last lines of vgpud and its scheduler.
func (e env) dump(t *testing.T, ns string) {
	for _, args := range [][]string{
		{"-n", ns, "get", "pods", "-o", "wide"},
		{"-n", ns, "get", "pods", "-o", `custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,PHASE:.status.phase,VGPUD:.metadata.annotations.vgpud\.io/phase,SCHEDULED:.status.conditions[?(@.type=="PodScheduled")].message`},
		{"-n", ns, "get", "events", "--sort-by=.lastTimestamp"},
		{"-n", system, "get", "pods", "-o", "wide", "--show-labels"},
		{"-n", system, "logs", "-l", "app.kubernetes.io/component=node", "--prefix", "--tail=15"},
		{"-n", system, "logs", "deploy/vgpud-scheduler", "--tail=20"},
	} {
		out, err := e.kubectl(args...)
		t.Logf("kubectl %s:\n%s%v", strings.Join(args, " "), out, err)
	}
}

// kubectlVgpud runs `kubectl vgpud ARGS` from this machine with the admin
// kubeconfig, the built vgpud linked as kubectl-vgpud on PATH, as a user
// installs the plugin; it returns what it printed.
func (e env) kubectlVgpud(t *testing.T, args ...string) string {
	t.Helper()
	plugins := t.TempDir()
	if err := os.Symlink(filepath.Join(e.scripts, "..", "bin", "vgpud"), filepath.Join(plugins, "kubectl-vgpud")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("kubectl", append([]string{"vgpud"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig, "PATH="+plugins+":"+os.Getenv("PATH"))
	table, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl vgpud %s: %v: %s", strings.Join(args, " "), err, table)
	}
	return string(table)
}

// viewerKubeconfig writes a copy of the admin kubeconfig with a second
// context, vgpud-viewer: a ServiceAccount bound to the shipped
// vgpud-viewer ClusterRole and nothing else.
func (e env) viewerKubeconfig(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	const name = "e2e-vgpud-viewer"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	if _, err := e.kube.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: e.name("-viewer")},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: "default"}},
	}
	if _, err := e.kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tok, err := e.kube.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := cfg.Contexts[cfg.CurrentContext]
	if admin == nil {
		t.Fatalf("%s has no current context", e.kubeconfig)
	}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["vgpud-viewer"] = &clientcmdapi.Context{Cluster: admin.Cluster, AuthInfo: name}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// installed is the cluster's nodes once vgpud serves on every one: as
// the scenarios before left it (pods they restarted given time to be
// ready), or installed with the chart where there is no vgpud, as when a
// scenario runs alone.
func (e env) installed(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	if _, err := e.kube.AppsV1().DaemonSets(system).Get(ctx, e.name(""), metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Log("no vgpud in the cluster: installing it with the chart")
		return installWithChart(t, e)
	} else if err != nil {
		t.Fatal(err)
	}
	var image string
	var pods *corev1.PodList
	harness.Eventually(t, 2*time.Minute, "vgpud ready on every node", func() error {
		ds, err := e.kube.AppsV1().DaemonSets(system).Get(ctx, e.name(""), metav1.GetOptions{})
		if err != nil {
			return err
		}
		// Rolled out, not only ready: every pod runs the template.
		if st := ds.Status; st.DesiredNumberScheduled == 0 || st.ObservedGeneration < ds.Generation || st.NumberReady != st.DesiredNumberScheduled ||
			st.UpdatedNumberScheduled != st.DesiredNumberScheduled || st.NumberUnavailable > 0 {
			return fmt.Errorf("DaemonSet %+v", st)
		}
		image = ds.Spec.Template.Spec.Containers[0].Image
		// The status can lag the pods: one a scenario just deleted may
		// still count as ready while its replacement has no node yet.
		if pods, err = e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || len(p.Status.ContainerStatuses) == 0 {
				return fmt.Errorf("%s on %q is going or not started yet", p.Name, p.Spec.NodeName)
			}
		}
		return nil
	})
	// What runs must be this build, not one a reused cluster kept: a
	// scenario would pass or fail on another binary.
	again := "bring the cluster up again (scripts/cluster.sh down; scripts/cluster.sh up)"
	pushed, err := os.ReadFile(filepath.Join(filepath.Dir(e.kubeconfig), "vgpud-image"))
	if err != nil {
		t.Fatalf("this build's image is not known (%v): %s", err, again)
	}
	_, digest, _ := strings.Cut(strings.TrimSpace(string(pushed)), "@")
	if digest == "" || !strings.HasSuffix(image, "@"+digest) {
		t.Fatalf("the cluster runs vgpud %s, not this build's %s: %s", image, strings.TrimSpace(string(pushed)), again)
	}
	for _, p := range pods.Items {
		if st := p.Status.ContainerStatuses; len(st) == 0 || !strings.HasSuffix(st[0].ImageID, "@"+digest) {
			t.Fatalf("%s on %s runs %v, not this build's %s: %s", p.Name, p.Spec.NodeName, st, digest, again)
		}
	}
	return e.nodes(t)
}

// daemonSetReady waits until every vgpud pod the DaemonSet wants is
// ready again, after a pod of it was killed or deleted.
func (e env) daemonSetReady(t *testing.T) {
	t.Helper()
	harness.Eventually(t, 120*time.Second, "DaemonSet ready again", func() error {
		ds, err := e.kube.AppsV1().DaemonSets(system).Get(context.Background(), e.name(""), metav1.GetOptions{})
		if err != nil || ds.Status.NumberReady != ds.Status.DesiredNumberScheduled {
			return fmt.Errorf("DaemonSet %+v %v", ds.Status, err)
		}
		return nil
	})
}
