//go:build e2e

package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/scripts/harness"
)

// What the tests against a real kube-apiserver and kube-scheduler
// (scheduler_test.go, allocator_test.go) share.

// claimNamespace makes ns with the account a pod needs, which no
// controller-manager here makes.
func claimNamespace(t *testing.T, ctx context.Context, kube kubernetes.Interface, ns string) {
	t.Helper()
	harness.EnsureNamespace(t, kube, ns, nil)
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// startDriver starts a claim driver for node, as the node role would, in
// a directory of its own (returned: the CDI specs', the record's, and
// kubelet's plugin/ and registry/ there); it stops at the test's end.
func startDriver(t *testing.T, ctx context.Context, kube kubernetes.Interface, node string) (*ClaimDriver, *Preparer, string) {
	t.Helper()
	dir := t.TempDir()
	dirs := KubeletDirs{Plugin: filepath.Join(dir, "plugin"), Registry: filepath.Join(dir, "registry")}
	for _, d := range []string{dirs.Plugin, dirs.Registry} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	prep, err := NewPreparer(node, filepath.Join(dir, "dra.json"), dir, fakeEdits, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	driver, err := StartClaimDriver(ctx, kube, node, dirs, dradevices.ClaimDefaults{MemPercent: 100}, prep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(driver.Stop)
	return driver, prep, dir
}

// publish starts a claim driver for node and publishes inv, waiting for
// its ResourceSlice.
func publish(t *testing.T, ctx context.Context, kube kubernetes.Interface, node string, inv protocol.Inventory) *ClaimDriver {
	t.Helper()
	driver, _, _ := startDriver(t, ctx, kube, node)
	if err := driver.Publish(ctx, inv, dradevices.Marks{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the node's ResourceSlice as published", func() error {
		list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil || len(list.Items) != 1 {
			return fmt.Errorf("%d slices, %v", len(list.Items), err)
		}
		return nil
	})
	return driver
}

// claimPod is a pod on node whose one container uses the claim of that
// name, tolerating every node taint.
func claimPod(name, node, claim string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Spec: corev1.PodSpec{
		NodeSelector:   map[string]string{"kubernetes.io/hostname": node},
		Tolerations:    []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim}},
		Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{
			Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
	}}
}

// placed waits until kube-scheduler has bound pod ns/name or found it
// unschedulable, and returns why not ("" where bound).
func placed(t *testing.T, ctx context.Context, kube kubernetes.Interface, ns, name string) (unschedulable string) {
	t.Helper()
	harness.Eventually(t, 30*time.Second, "pod "+name+" scheduled or refused", func() error {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != "" {
			return nil
		}
		if why, ok := harness.Unschedulable(p); ok {
			unschedulable = why
			return nil
		}
		return errors.New("pending")
	})
	return unschedulable
}

// spawnScheduler runs a stock kube-scheduler, no extender, against
// kubeconfig.
func spawnScheduler(t *testing.T, kubeconfig, bin string) *harness.Process {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "scheduler.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection: {kubeconfig: %s}\nleaderElection: {leaderElect: false}\n", kubeconfig)), 0o644); err != nil {
		t.Fatal(err)
	}
	return harness.Spawn(t, "kube-scheduler", filepath.Join(bin, "kube-scheduler"), "--config="+cfg, "--secure-port=0", "--v=2")
}

// readyNode makes a Node the scheduler takes: Ready, with room for pods,
// and no taint (no kubelet or node controller here clears one).
func readyNode(t *testing.T, ctx context.Context, kube kubernetes.Interface, name string) {
	t.Helper()
	n, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = nil
	if n, err = kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	room := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110")}
	n.Status.Capacity, n.Status.Allocatable = room, room
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func capacity(requests map[resourceapi.QualifiedName]string) *resourceapi.CapacityRequirements {
	if requests == nil {
		return nil
	}
	out := &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
	for k, v := range requests {
		out.Requests[k] = resource.MustParse(v)
	}
	return out
}

func qs(v resource.Quantity) string { return strings.TrimSpace(v.String()) }
