//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// heldCharged is #50 item 1's last case, as a tenant with edit on the
// enforcing node: a pod's process passes its descriptor outside the pod
// (here: a host process, moved into the pod's container while it opens
// the GPU and out again before the pod is deleted, so the mock keeps its
// memory listed after the pod has gone). The memory stays charged to the
// pod's namespace: a pod its quota would take otherwise is refused at
// create, saying what is held, until the driver frees it.
func heldCharged(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	node := nodes[0]
	const ns = "e2e-held-quota"
	asTenant := newTenant(t, e, ns)
	snap := e.inspect(t, node)
	if snap.Use == nil || snap.Use.Mode != "enforce" {
		t.Fatalf("%s's GPU usage: %+v; want mode enforce", node, snap.Use)
	}
	gpu := snap.GPUs[0].UUID
	g := e.inventoryGPU(t, node, gpu)
	// A quota that holds the ask alone, and the leaker's slice, but not
	// the ask beside the 1024 MiB the leaker's process still holds.
	ask := max(g.MemoryMiB/int64(g.Split), 2500)
	quota := ask + 500
	quotas := e.kube.CoreV1().ResourceQuotas(ns)
	if _, err := quotas.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
		"requests.nvidia.com/gpumem": *resource.NewQuantity(quota, resource.DecimalSI)}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.emptyNamespace(t, ns) })
	pod := func(name string, mem int64) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  annotations: {nvidia.com/use-gpuuuid: %q}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: vgpud.local/busybox:1, command: [sleep, "3610"], resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "%d", nvidia.com/gpucores: "10"}}}
`, name, gpu, node, mem)
	}
	// Admission waits for the quota's first status.
	harness.Eventually(t, 30*time.Second, "leaker admitted", func() error {
		out, err := asTenant(pod("leaker", 2000), "apply", "-f", "-")
		return harness.Contains(out+fmt.Sprint(err), "created")
	})
	e.waitRunning(t, ns, []string{"leaker"}, 120*time.Second)
	lp, err := e.kube.CoreV1().Pods(ns).Get(ctx, "leaker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vgpud, err := e.vgpudPod(node)
	if err != nil {
		t.Fatal(err)
	}
	host := startBoundedHostProcess(t)
	back := moveCgroups(t, host, e.processIn(t, ns, "leaker", "sleep 3610"))
	e.declareProcess(t, vgpud, gpu, host, 1000, -1) // within its slice: never ended
	t.Cleanup(func() {
		if r, err := e.vgpudPod(node); err == nil {
			e.declareProcess(t, r, gpu, host, 0, -1)
		}
	})
	harness.Eventually(t, 15*time.Second, "leaker charged the process it opened the GPU in", func() error {
		for _, c := range e.inspect(t, node).Use.Containers {
			if c.Pod == "leaker" && c.UsedMiB == 1000 {
				return nil
			}
		}
		return fmt.Errorf("leaker not charged 1000 MiB: %+v", e.inspect(t, node).Use.Containers)
	})
	back() // the descriptor outside the pod
	e.emptyNamespace(t, ns)
	harness.Eventually(t, 75*time.Second, "the node publishing the memory leaker's process holds", func() error {
		u, err := protocol.DecodeUsage(e.nodeAnnotation(t, node, wellknown.AnnotationUsage))
		if err != nil {
			return err
		}
		for _, h := range u.Held {
			for _, p := range h.Pods {
				if h.GPU == gpu && p.UID == string(lp.UID) && p.MiB >= 1000 {
					return nil
				}
			}
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", host))
		var seen, held any = "no sample", "no sample"
		if use := e.inspect(t, node).Use; use != nil {
			seen, held = use.Unattributed, use.GPUs
		}
		return fmt.Errorf("%s's usage, taken %v, holds %+v; want leaker's 1000 MiB on %s (host process %d alive: %v, cgroups %q; the node sees unattributed %+v, held %+v)",
			node, u.Taken, u.Held, gpu, host, syscall.Kill(host, 0) == nil, cg, seen, held)
	})
	harness.Eventually(t, 30*time.Second, "after refused: leaker's memory is charged to the namespace", func() error {
		out, err := asTenant(pod("after", ask), "apply", "-f", "-")
		if err == nil {
			// The leader may not have read the node's report yet.
			_, _ = asTenant("", "delete", "pod", "after", "--wait")
			return fmt.Errorf("after (%d MiB) admitted under a %d MiB quota with leaker's memory held: %s", ask, quota, out)
		}
		return harness.Contains(out, fmt.Sprintf("gpumem quota %d MiB, in use 1024 (1024 of it held beyond the pods' slices", quota))
	})
	e.declareProcess(t, vgpud, gpu, host, 0, -1)
	freed := time.Now()
	harness.Eventually(t, 75*time.Second, "after admitted once the memory is freed", func() error {
		out, err := asTenant(pod("after", ask), "apply", "-f", "-")
		return harness.Contains(out+fmt.Sprint(err), "created")
	})
	e.waitRunning(t, ns, []string{"after"}, 120*time.Second)
	t.Logf("1000 MiB a deleted pod's process held was charged to %s (quota %d MiB, a %d MiB pod refused); freed, the pod was admitted %v later and ran",
		ns, quota, ask, time.Since(freed).Round(time.Second))
}

// startBoundedHostProcess starts a process of no container that ends
// with the test's cleanup, or in ten minutes: unlike startHostProcess,
// not with the thread that started it.
func startBoundedHostProcess(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// moveCgroups moves pid into the cgroups of process of, in every
// hierarchy, and returns what moves it back: a process that opened the
// GPU in a container and was passed out of it.
func moveCgroups(t *testing.T, pid, of int) (back func()) {
	t.Helper()
	was, to := cgroupsOf(t, pid), cgroupsOf(t, of)
	move := func(where map[string]string) {
		for dir, path := range where {
			if err := os.WriteFile(filepath.Join(dir, path, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
				t.Fatalf("move %d to %s%s: %v", pid, dir, path, err)
			}
		}
	}
	move(to)
	return func() { move(was) }
}

// cgroupsOf is pid's cgroup in each mounted hierarchy, by its mount.
func cgroupsOf(t *testing.T, pid int) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		dir := "/sys/fs/cgroup/" + strings.TrimPrefix(f[1], "name=")
		if f[1] == "" { // the unified hierarchy: alone, or beside v1's
			dir = "/sys/fs/cgroup/unified"
			if _, err := os.Stat(dir); err != nil {
				dir = "/sys/fs/cgroup"
			}
		}
		if _, err := os.Stat(filepath.Join(dir, f[2], "cgroup.procs")); err == nil {
			out[dir] = f[2]
		}
	}
	return out
}
