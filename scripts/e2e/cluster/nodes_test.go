//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// The scenarios that need more than one node: the node policy choosing
// between nodes through the real kube-scheduler, a node whose vgpud pod is
// gone, and the webhook and extender reached across nodes.

// gpuLabel is what makes a node a GPU node for the DaemonSet's node
// affinity here (GPU feature discovery's; NFD's and vgpud.io/gpu would too).
const gpuLabel = "nvidia.com/gpu.present"

// nodePolicy places pods one at a time, each after the one before is
// bound, so that the books hold it: spread puts them on distinct nodes,
// binpack on one.
func nodePolicy(t *testing.T, e env, nodes []string) {
	ns := "e2e-policy"
	e.namespace(t, ns, nil)
	e.idleGPUs(t)
	place := func(name string, annotations map[string]string) string { return e.placeOne(t, ns, name, annotations) }
	spread := map[string]int{}
	for i := range nodes {
		spread[place(fmt.Sprintf("spread-%d", i), map[string]string{wellknown.AnnotationNodePolicy: "spread"})]++
	}
	t.Logf("spread: %d pods on %v", len(nodes), spread)
	if len(spread) != len(nodes) {
		t.Errorf("spread put %d pods on %d of %d nodes: %v", len(nodes), len(spread), len(nodes), spread)
	}
	// Every node now holds one pod; binpack fills the fullest of them.
	binpack := map[string]int{}
	for i := range 4 {
		binpack[place(fmt.Sprintf("binpack-%d", i), nil)]++
	}
	t.Logf("binpack: 4 pods on %v", binpack)
	if len(binpack) != 1 {
		t.Errorf("binpack spread 4 pods over %d nodes: %v", len(binpack), binpack)
	}
	names := []string{}
	for i := range nodes {
		names = append(names, fmt.Sprintf("spread-%d", i))
	}
	for i := range 4 {
		names = append(names, fmt.Sprintf("binpack-%d", i))
	}
	e.waitRunning(t, ns, names, 120*time.Second)
}

// idleGPUs waits until no GPU is booked: earlier scenarios' pods are
// going, and a placement policy must decide, not their leftovers.
func (e env) idleGPUs(t *testing.T) {
	t.Helper()
	harness.Eventually(t, 120*time.Second, "no GPU booked", func() error {
		used, err := apiUsage(e)
		if err != nil {
			return err
		}
		if len(used) > 0 {
			return fmt.Errorf("%d GPUs in use", len(used))
		}
		return nil
	})
}

// placeOne creates a small vGPU pod (2000 MiB, 10% of the cores) in ns
// and waits until vgpud's scheduler has bound it with an assignment; it
// returns its node.
func (e env) placeOne(t *testing.T, ns, name string, annotations map[string]string) string {
	t.Helper()
	ctx := context.Background()
	p := gpuPod(name, map[string]string{"nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "10"}, annotations)
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var node string
	harness.Eventually(t, 90*time.Second, name+" bound", func() error {
		p, err := e.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.SchedulerName != "vgpud-scheduler" {
			t.Fatalf("%s: schedulerName %q", name, p.Spec.SchedulerName)
		}
		if p.Spec.NodeName == "" || p.Annotations[wellknown.AnnotationAssignment] == "" {
			return fmt.Errorf("not bound yet")
		}
		node = p.Spec.NodeName
		return nil
	})
	return node
}

// nodeWithoutVgpud takes a node out of the DaemonSet, as an operator
// would, by its label; GPU pods created at once, while its vgpud pod
// drains, land on the other nodes and none fails. The label comes back at
// the end, and so does the node.
func nodeWithoutVgpud(t *testing.T, e env, nodes []string) {
	if len(nodes) < 2 {
		t.Skipf("needs two nodes; the cluster has %d", len(nodes))
	}
	ctx := context.Background()
	ns := "e2e-avoid"
	e.namespace(t, ns, nil)
	leader, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	// Not the leader's node: this is about the node role alone.
	off := nodes[0]
	if off == leader.Spec.NodeName {
		off = nodes[1]
	}
	plugin := func() (string, error) {
		n, err := e.kube.CoreV1().Nodes().Get(ctx, off, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return n.Annotations[wellknown.AnnotationPlugin], nil
	}
	before, err := e.vgpudPod(off)
	if err != nil {
		t.Fatal(err)
	}
	putBack := e.takeGPULabel(t, off)
	removed := time.Now()
	// The pods come once the node's vgpud has said it is going: a pod
	// scheduled in the instant before that (the DaemonSet controller and
	// kubelet have not acted yet) may still land there, and runs, which is
	// no failure but not what this scenario is about.
	said := harness.Eventually(t, 60*time.Second, off+"'s plugin draining", func() error {
		state, err := plugin()
		if err != nil {
			return err
		}
		if state != wellknown.PluginDraining {
			return fmt.Errorf("%s is %q", wellknown.AnnotationPlugin, state)
		}
		return nil
	})
	t.Logf("%s's label removed -> its vgpud says %q in %v", off, wellknown.PluginDraining, said.Round(time.Millisecond))
	const n = 6
	var names []string
	for i := range n {
		// spread: an emptier node would be preferred, were it served.
		p := gpuPod(fmt.Sprintf("avoid-%d", i), map[string]string{"nvidia.com/gpumem": "1500", "nvidia.com/gpucores": "10"}, map[string]string{wellknown.AnnotationNodePolicy: "spread"})
		if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
	}
	took := e.waitRunning(t, ns, names, 180*time.Second)
	placed := e.perNode(t, ns)
	t.Logf("%d GPU pods created while %s's vgpud drains: Running in %v, on %v", n, off, took.Round(time.Millisecond), placed)
	if placed[off] > 0 {
		t.Errorf("%d pods on %s, whose vgpud pod was going", placed[off], off)
	}
	pods, _ := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodFailed {
			t.Errorf("%s failed: %s: %s", p.Name, p.Status.Reason, p.Status.Message)
		}
	}
	harness.Eventually(t, 60*time.Second, "no vgpud pod on "+off, func() error {
		list, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node", FieldSelector: "spec.nodeName=" + off})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%s still there", list.Items[0].Name)
		}
		return nil
	})
	t.Logf("%s's vgpud pod gone within %v of its label", off, time.Since(removed).Round(time.Millisecond))
	// Back: a new vgpud pod runs there, ready and serving, and the node
	// advertises. Each is checked on its own object: the DaemonSet's status
	// and kubelet's node status can lag and still read the old state.
	putBack()
	back := harness.Eventually(t, 120*time.Second, off+" served again", func() error {
		if err := e.servedAgain(off, before); err != nil {
			return err
		}
		ds, err := e.kube.AppsV1().DaemonSets(system).Get(ctx, "vgpud", metav1.GetOptions{})
		if err != nil || int(ds.Status.NumberReady) != len(nodes) {
			return fmt.Errorf("DaemonSet %+v %v", ds.Status, err)
		}
		return nil
	})
	t.Logf("label back -> %s served again in %v", off, back.Round(time.Millisecond))
}

// acrossNodes moves the leadership, if it must, to a node that is neither
// the control plane's (node 1: kube-apiserver calls the webhook from
// there) nor vgpud-scheduler's, then creates a GPU pod: admission and the
// extender calls cross nodes through the Service and kube-proxy.
func acrossNodes(t *testing.T, e env, nodes []string) {
	if len(nodes) < 3 {
		t.Skipf("needs three nodes; the cluster has %d", len(nodes))
	}
	ctx := context.Background()
	ns := "e2e-across"
	e.namespace(t, ns, nil)
	const apiserverNode = "vgpud-node"
	scheds, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=vgpud-scheduler"})
	if err != nil || len(scheds.Items) != 1 {
		t.Fatalf("vgpud-scheduler pods: %v %v", scheds, err)
	}
	schedNode := scheds.Items[0].Spec.NodeName
	var leader *corev1.Pod
	for try := 0; ; try++ {
		leader, err = e.leader()
		if err != nil {
			t.Fatal(err)
		}
		if leader.Spec.NodeName != apiserverNode && leader.Spec.NodeName != schedNode {
			break
		}
		if try == 6 {
			t.Fatalf("leadership stayed on %s or %s through %d handoffs", apiserverNode, schedNode, try)
		}
		t.Logf("leader %s is on %s: hand over", leader.Name, leader.Spec.NodeName)
		if err := e.kube.CoreV1().Pods(system).Delete(ctx, leader.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		old := leader.Name
		harness.Eventually(t, 60*time.Second, "a new leader", func() error {
			l, err := e.leader()
			if err != nil {
				return err
			}
			if l.Name == old {
				return fmt.Errorf("%s still leads", old)
			}
			return nil
		})
	}
	t.Logf("kube-apiserver on %s, vgpud-scheduler on %s, leader %s on %s", apiserverNode, schedNode, leader.Name, leader.Spec.NodeName)
	start := time.Now()
	// The Service may route to a new leader a moment after its label.
	var p *corev1.Pod
	harness.Eventually(t, 60*time.Second, "admission across nodes", func() error {
		p, err = e.kube.CoreV1().Pods(ns).Create(ctx, gpuPod("across", map[string]string{"nvidia.com/gpumem": "1000"}, nil), metav1.CreateOptions{})
		return err
	})
	if p.Spec.SchedulerName != "vgpud-scheduler" {
		t.Fatalf("not admitted by vgpud: schedulerName %q", p.Spec.SchedulerName)
	}
	e.waitRunning(t, ns, []string{"across"}, 120*time.Second)
	// Only the leader's /bind writes the assignment: kube-scheduler's
	// extender calls reached it on its node.
	p, _ = e.kube.CoreV1().Pods(ns).Get(ctx, "across", metav1.GetOptions{})
	if p.Annotations[wellknown.AnnotationAssignment] == "" {
		t.Fatal("running without a vgpud assignment")
	}
	t.Logf("create -> Running across nodes: %v (pod on %s)", time.Since(start).Round(time.Millisecond), p.Spec.NodeName)
}

// takeGPULabel removes node's nvidia.com/gpu.present label, which the
// DaemonSet selects, so that the node's vgpud goes (draining first); the
// returned func puts the label back, as the end of t does if it was not
// called.
func (e env) takeGPULabel(t *testing.T, node string) (putBack func()) {
	t.Helper()
	set := func(value string) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, gpuLabel, value)
		if _, err := e.kube.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	set("null")
	var once sync.Once
	putBack = func() { once.Do(func() { set(`"true"`) }) }
	t.Cleanup(putBack)
	return putBack
}

// servedAgain says why node is not yet served by a ready vgpud pod that
// replaced before, its plugin serving and its GPUs advertised; nil once
// it is.
func (e env) servedAgain(node string, before *corev1.Pod) error {
	p, err := e.vgpudPod(node)
	if err != nil {
		return err
	}
	if p.UID == before.UID || !podReady(p) {
		return fmt.Errorf("%s is not a ready replacement of %s", p.Name, before.Name)
	}
	n, err := e.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if state := n.Annotations[wellknown.AnnotationPlugin]; state != wellknown.PluginServing {
		return fmt.Errorf("%s is %q", wellknown.AnnotationPlugin, state)
	}
	return e.advertising(node)
}
