//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpud/vgpud/kubeletapi/fakekubelet"
	"github.com/vgpud/vgpud/protocol"
)

// TestNodeRoleAgainstAPIServer runs `vgpud run --roles=node` with the
// 8-GPU mock against the real apiserver and a fake kubelet socket
// directory: registration, the inventory annotation, Allocate answered
// from the node-scoped informer with the phase written through the API,
// `vgpud inspect`, an XID injected and flagged, and re-registration after
// a kubelet restart. The real kubelet runs in the one-node cluster suite.
func TestNodeRoleAgainstAPIServer(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	const nodeName = "mock-a100"
	if _, err := e.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lists := make(chan []*pluginapi.Device, 64)
	kubelet, err := fakekubelet.Start(dir, lists)
	if err != nil {
		t.Fatal(err)
	}
	defer kubelet.Stop()
	sock := filepath.Join(dir, "inspect.sock")
	cmd := exec.Command(e.vgpud, "run", "--roles=node", "--gpu-backend=mock:dgxa100", "--node-name="+nodeName, "--kubeconfig="+e.kubeconfig,
		"--device-plugin-dir="+dir, "--inspect-socket="+sock, "--health-recovery=2s", "--log-format=text",
		// The guessing path, which this suite's fake kubelet exercises,
		// whatever runtime this machine runs (the cluster suite's
		// containerd leaves its NRI socket on the host).
		"--nri-socket=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("SIGTERM: %v\n%s", err, out.String())
		}
	}()
	select {
	case r := <-kubelet.Registrations:
		t.Logf("process start -> registered with kubelet: %v", time.Since(start).Round(time.Millisecond))
		if r.ResourceName != "nvidia.com/gpu" || !r.Options.GetPreferredAllocationAvailable {
			t.Fatalf("registration %+v", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no registration within 20s\n%s", out.String())
	}
	if devs := <-lists; len(devs) != 80 {
		t.Fatalf("ListAndWatch: %d devices, want 80", len(devs))
	}
	var inv protocol.Inventory
	harness.Eventually(t, 20*time.Second, "inventory annotation", func() error {
		n, err := e.kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if inv, err = protocol.DecodeInventory(n.Annotations[wellknown.AnnotationGPUs]); err != nil {
			return err
		}
		if len(inv.GPUs) != 8 || inv.GPUs[0].Split != 10 || inv.GPUs[0].MemoryMiB != 40960 || inv.GPUs[7].NUMA != 1 {
			return fmt.Errorf("inventory %+v", inv)
		}
		return nil
	})

	// The leader's side of a bind, written by hand: assignment, phase, node.
	uuid := inv.GPUs[5].UUID
	raw, err := protocol.EncodeAssignment(protocol.Assignment{Node: nodeName, Containers: []protocol.ContainerAssignment{{Name: "main", GPUs: []protocol.GPUSlice{{UUID: uuid, MemoryMiB: 6000, Cores: 25}}}}})
	if err != nil {
		t.Fatal(err)
	}
	harness.EnsureNamespace(t, e.kube, "node-e2e", nil)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "node-e2e", Name: "trainer", Annotations: map[string]string{wellknown.AnnotationAssignment: raw, wellknown.AnnotationPhase: string(protocol.PhaseBound)}},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	if _, err := e.kube.CoreV1().Pods("node-e2e").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	r, err := kubelet.Allocate(ctx, []string{uuid + "-3"})
	if err != nil {
		t.Fatalf("Allocate: %v\n%s", err, out.String())
	}
	t.Logf("pod created -> Allocate answered: %v", time.Since(before).Round(time.Millisecond))
	if r.Envs["NVIDIA_VISIBLE_DEVICES"] != uuid || r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "6000m" || r.Envs["CUDA_DEVICE_SM_LIMIT"] != "25" {
		t.Errorf("env %v", r.Envs)
	}
	harness.Eventually(t, 10*time.Second, "phase allocated", func() error {
		p, err := e.kube.CoreV1().Pods("node-e2e").Get(ctx, "trainer", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := p.Annotations[wellknown.AnnotationPhase]; got != string(protocol.PhaseAllocated) {
			return fmt.Errorf("phase %q", got)
		}
		return nil
	})
	if _, err := kubelet.Allocate(ctx, []string{uuid + "-4"}); err == nil || !strings.Contains(err.Error(), "node-e2e/trainer (allocated)") {
		t.Errorf("Allocate with nothing bound: %v", err)
	}

	inspect := func(args ...string) string {
		c := exec.Command(e.vgpud, append([]string{"inspect", "--inspect-socket=" + sock}, args...)...)
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("vgpud inspect %v: %v\n%s", args, err, b)
		}
		return string(b)
	}
	view := inspect()
	t.Logf("vgpud inspect:\n%s", view)
	if err := harness.Contains(view, "node-e2e/trainer", "6000/40960", "registered 1 time(s)", "allocated"); err != nil {
		t.Error(err)
	}
	if err := harness.Contains(inspect("--json"), `"slicesUsed": 1`, `"ready": true`); err != nil {
		t.Error(err)
	}

	// A critical XID takes GPU 2 out of ListAndWatch and flags it; it comes back.
	inspect("--inject-xid=2:79")
	if devs := <-lists; len(devs) != 70 {
		t.Errorf("after XID: %d devices, want 70", len(devs))
	}
	harness.Eventually(t, 10*time.Second, "GPU 2 flagged unhealthy", func() error { return gpuHealth(e, nodeName, 2, false) })
	back := harness.Eventually(t, 20*time.Second, "GPU 2 healthy again", func() error { return gpuHealth(e, nodeName, 2, true) })
	t.Logf("XID 79 -> GPU 2 healthy again after %v (recovery quiet period 2s)", back.Round(time.Millisecond))

	// Kubelet restarts: every socket wiped, kubelet.sock created again.
	kubelet.Stop()
	time.Sleep(100 * time.Millisecond)
	if kubelet, err = fakekubelet.Start(dir, lists); err != nil {
		t.Fatal(err)
	}
	select {
	case <-kubelet.Registrations:
		t.Logf("kubelet.sock created -> Register received: %v", time.Since(kubelet.Started).Round(time.Microsecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("no re-registration\n%s", out.String())
	}
	if rss, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)); err == nil {
		for _, l := range strings.Split(string(rss), "\n") {
			if strings.HasPrefix(l, "VmRSS:") || strings.HasPrefix(l, "VmHWM:") {
				t.Logf("node-only daemon, 8-GPU mock, after the above: %s", l)
			}
		}
	}
}

func gpuHealth(e env, node string, index int, healthy bool) error {
	n, err := e.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	inv, err := protocol.DecodeInventory(n.Annotations[wellknown.AnnotationGPUs])
	if err != nil {
		return err
	}
	if inv.GPUs[index].Healthy != healthy {
		return fmt.Errorf("GPU %d healthy=%v", index, inv.GPUs[index].Healthy)
	}
	return nil
}
