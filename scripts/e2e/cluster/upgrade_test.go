//go:build e2e

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/containerenv"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// nextImage is the stand-in for a newer vgpud release (make build-next):
// it writes wire fields this release does not know. scripts/images.sh
// builds it and scripts/cluster.sh imports it on every node.
const nextImage = "ghcr.io/vgpud/vgpud:next"

// rollingUpgrade upgrades one node's replica ahead of the others, as a
// paused rolling upgrade leaves a cluster, with GPU pods running: the
// DaemonSet goes to OnDelete with the newer image and only that node's
// pod is replaced. Then, each way round, the two releases must work
// together on what the other wrote: the old leader places a pod on the
// newer node (reading its inventory), and, once the newer replica leads,
// it places a pod on an old node (which reads its assignment). No GPU pod
// may restart or fail, and the leader's books must match the API. The
// DaemonSet is rolled back at the end, whatever happened.
func rollingUpgrade(t *testing.T, e env, nodes []string) {
	if len(nodes) < 2 {
		t.Skipf("a skewed cluster needs two nodes; the cluster has %d", len(nodes))
	}
	ctx := context.Background()
	ns := "e2e-upgrade"
	e.namespace(t, ns, nil)

	// GPU pods on the nodes, before anything is upgraded.
	var running []string
	for i := range len(nodes) {
		p := gpuPod(fmt.Sprintf("before-%d", i), map[string]string{"nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"},
			map[string]string{wellknown.AnnotationNodePolicy: "spread"})
		if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		running = append(running, p.Name)
	}
	e.waitRunning(t, ns, running, 120*time.Second)

	old, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	newer := ""
	for _, n := range nodes {
		if n != old.Spec.NodeName {
			newer = n
			break
		}
	}
	ds, err := e.kube.AppsV1().DaemonSets(system).Get(ctx, "vgpud", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	image := ds.Spec.Template.Spec.Containers[0].Image
	t.Cleanup(func() { e.rollBack(t, image, nodes) })

	// The paused rollout: the template names the newer image, and only
	// the newer node's pod is replaced.
	if err := e.patchDaemonSet(`{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null},"template":{"spec":{"containers":[{"name":"vgpud","image":"` + nextImage + `"}]}}}}`); err != nil {
		t.Fatal(err)
	}
	before, err := e.vgpudPod(newer)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.kube.CoreV1().Pods(system).Delete(ctx, before.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var next *corev1.Pod
	harness.Eventually(t, 120*time.Second, "the newer replica ready on "+newer, func() error {
		p, err := e.vgpudPod(newer)
		if err != nil {
			return err
		}
		if p.Name == before.Name || p.Spec.Containers[0].Image != nextImage || !podReady(p) {
			return fmt.Errorf("pod %s image %s ready %v", p.Name, p.Spec.Containers[0].Image, podReady(p))
		}
		next = p
		return e.advertising(newer)
	})
	if out, err := e.kubectl("-n", system, "exec", next.Name, "--", "vgpud", "version"); err != nil || !strings.HasPrefix(out, "vgpud next ") {
		t.Fatalf("vgpud version on %s: %q %v", newer, out, err)
	}
	// It writes what this release does not know: the proof that the two
	// releases below are really skewed.
	harness.Eventually(t, 30*time.Second, newer+"'s inventory in the newer format", func() error {
		n, err := e.kube.CoreV1().Nodes().Get(ctx, newer, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if inv := n.Annotations[wellknown.AnnotationGPUs]; !strings.Contains(inv, `"nextField":1`) {
			return fmt.Errorf("inventory %s", inv)
		}
		return nil
	})

	// The old leader reads the newer inventory and places a pod there; the
	// newer node hands it the slice the old leader wrote.
	onNewer := pinned("on-newer-node", newer)
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, onNewer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, ns, []string{onNewer.Name}, 120*time.Second)
	e.sliceGranted(t, ns, onNewer.Name, false)
	running = append(running, onNewer.Name)
	t.Logf("old leader %s placed a pod on %s, which runs %s", old.Name, newer, nextImage)

	// The newer replica leads: the old ones stall (SIGSTOP, as a machine
	// that stops answering) until it holds the Lease, then go on and find
	// they lost it.
	e.leadFrom(t, next, nodes)
	oldNode := old.Spec.NodeName
	onOld := pinned("on-old-node", oldNode)
	harness.Eventually(t, 60*time.Second, "a pod admitted by the newer leader", func() error {
		_, err := e.kube.CoreV1().Pods(ns).Create(ctx, onOld, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // an earlier try landed though its answer was lost
		}
		return err
	})
	e.waitRunning(t, ns, []string{onOld.Name}, 120*time.Second)
	e.sliceGranted(t, ns, onOld.Name, true)
	running = append(running, onOld.Name)
	t.Logf("newer leader %s placed a pod on %s, which runs the old release", next.Name, oldNode)

	// Nothing that ran was disturbed, and the books hold.
	pods, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || restarts(&p) != 0 {
			t.Errorf("pod %s: %s, %d restarts", p.Name, p.Status.Phase, restarts(&p))
		}
	}
	if len(pods.Items) != len(running) {
		t.Errorf("%d pods in %s, want %v", len(pods.Items), ns, running)
	}
	harness.Eventually(t, 30*time.Second, "the newer leader's books match the API", e.booksMatch)
}

// pinned is a GPU pod for node.
func pinned(name, node string) *corev1.Pod {
	p := gpuPod(name, map[string]string{"nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"}, nil)
	p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	return p
}

// sliceGranted checks that pod's container got the slice its assignment
// names, and whether that assignment came in the newer format.
func (e env) sliceGranted(t *testing.T, ns, pod string, newerFormat bool) {
	t.Helper()
	p, err := e.kube.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw := p.Annotations[wellknown.AnnotationAssignment]
	if got := strings.Contains(raw, `"nextField":1`); got != newerFormat {
		t.Errorf("pod %s's assignment %s: newer fields %v, want %v", pod, raw, got, newerFormat)
	}
	a, err := protocol.DecodeAssignment(raw)
	if err != nil {
		t.Fatal(err)
	}
	env := e.containerEnv(t, ns, pod)
	if g := a.Containers[0].GPUs[0]; env[containerenv.EnvVisibleDevices] != g.UUID || env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
		t.Errorf("pod %s sees %v; its assignment gives it %+v", pod, env, g)
	}
}

// leadFrom makes the replica pod the leader: every other replica stalls
// until pod holds the Lease.
func (e env) leadFrom(t *testing.T, pod *corev1.Pod, nodes []string) {
	t.Helper()
	ctx := context.Background()
	var stalled []int
	resume := func() {
		for _, pid := range stalled {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		stalled = nil
	}
	// Resumed on every way out, t.Fatal included: a stalled replica
	// would break every later scenario.
	defer resume()
	for _, n := range nodes {
		p, err := e.vgpudPod(n)
		if err != nil {
			t.Fatal(err)
		}
		if p.Name == pod.Name {
			continue
		}
		pid, err := hostPID(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, pid)
	}
	harness.Eventually(t, 60*time.Second, pod.Name+" holding the Lease", func() error {
		l, err := e.kube.CoordinationV1().Leases(system).Get(ctx, "vgpud-leader", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if h := l.Spec.HolderIdentity; h == nil || *h != pod.Name {
			return fmt.Errorf("holder %v", h)
		}
		return nil
	})
	resume()
	harness.Eventually(t, 60*time.Second, pod.Name+" the one pod labelled leader", func() error {
		l, err := e.leader()
		if err != nil {
			return err
		}
		if l.Name != pod.Name {
			return fmt.Errorf("%s labelled", l.Name)
		}
		return nil
	})
}

func (e env) patchDaemonSet(patch string) error {
	_, err := e.kube.AppsV1().DaemonSets(system).Patch(context.Background(), "vgpud", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch DaemonSet vgpud: %w", err)
	}
	return nil
}

// rollBack puts the DaemonSet back on image with its rolling updates,
// waits until every node runs image, ready and advertising GPUs, and
// checks that the books of the leader, now of the old release again,
// match the API: it reads the assignments the newer leader wrote.
func (e env) rollBack(t *testing.T, image string, nodes []string) {
	ctx := context.Background()
	back, err := json.Marshal(image)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.patchDaemonSet(`{"spec":{"updateStrategy":{"type":"RollingUpdate"},"template":{"spec":{"containers":[{"name":"vgpud","image":` + string(back) + `}]}}}}`); err != nil {
		t.Error(err)
		return
	}
	harness.Eventually(t, 240*time.Second, "every replica back on "+image, func() error {
		pods, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Spec.Containers[0].Image != image && p.DeletionTimestamp == nil {
				// OnDelete left it; RollingUpdate may not have reached it yet.
				_ = e.kube.CoreV1().Pods(system).Delete(ctx, p.Name, metav1.DeleteOptions{})
				return fmt.Errorf("pod %s still on %s", p.Name, p.Spec.Containers[0].Image)
			}
		}
		ds, err := e.kube.AppsV1().DaemonSets(system).Get(ctx, "vgpud", metav1.GetOptions{})
		if err != nil || ds.Status.NumberReady != ds.Status.DesiredNumberScheduled || ds.Status.UpdatedNumberScheduled != ds.Status.DesiredNumberScheduled {
			return fmt.Errorf("DaemonSet %+v %v", ds.Status, err)
		}
		if _, err := e.leader(); err != nil {
			return err
		}
		for _, n := range nodes {
			if err := e.advertising(n); err != nil {
				return err
			}
		}
		return nil
	})
	harness.Eventually(t, 30*time.Second, "the rolled-back leader's books match the API", e.booksMatch)
}
