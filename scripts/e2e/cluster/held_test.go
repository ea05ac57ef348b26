//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// forkAndHold is the fork that beat the memory fence (#50 items 1, 2
// and 8), as a tenant with edit on the enforcing node: a container's
// opener holds 30000 MiB of a 2000 MiB slice and its sibling process
// keeps the descriptor, so killing the opener frees nothing (the mock
// keeps the memory listed while any process of the container lives).
// The node ends the container whole; the memory visibly comes back;
// the co-tenant on the same GPU keeps running. Then memory no pod
// holds (a host process) is counted by the leader: a slice the GPU's
// real free memory cannot hold waits, with a reason that says so, until
// the memory is freed.
func forkAndHold(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	node := nodes[0]
	ns := "e2e-held"
	asTenant := newTenant(t, e, ns)
	snap := e.inspect(t, node)
	if snap.Use == nil || snap.Use.Mode != "enforce" {
		t.Fatalf("%s's GPU usage: %+v; want mode enforce", node, snap.Use)
	}
	gpu, mem := snap.GPUs[0].UUID, int(snap.GPUs[0].MemoryMiB)
	hold := mem * 3 / 4 // far past a 2000 MiB slice, within the GPU
	pod := func(name, mem, command string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  annotations: {nvidia.com/use-gpuuuid: %q}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: vgpud.local/busybox:1
    command: [sh, -c, %q]
    resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: %q, nvidia.com/gpucores: "10"}}
`, name, gpu, node, command, mem)
	}
	// The opener (sleep 3600) and a sibling that keeps its descriptor
	// (sleep 3601), under the container's shell.
	for name, cmd := range map[string]string{"forker": "sleep 3600 & sleep 3601 & wait", "neighbour": "exec sleep 3602"} {
		if out, err := asTenant(pod(name, "2000", cmd), "apply", "-f", "-"); err != nil {
			t.Fatalf("create %s as the tenant: %v: %s", name, err, out)
		}
	}
	e.waitRunning(t, ns, []string{"forker", "neighbour"}, 120*time.Second)
	vgpud, err := e.vgpudPod(node)
	if err != nil {
		t.Fatal(err)
	}
	opener := e.processIn(t, ns, "forker", "sleep 3600")
	sibling := e.processIn(t, ns, "forker", "sleep 3601")
	neighbour := e.processIn(t, ns, "neighbour", "sleep 3602")
	e.declareProcess(t, vgpud, gpu, neighbour, 1500, -1)
	t.Cleanup(func() { e.declareProcess(t, vgpud, gpu, neighbour, 0, -1) })
	declared := time.Now()
	e.declareProcess(t, vgpud, gpu, opener, hold, -1)

	// The opener is killed first; its memory stays listed while the
	// sibling lives; two samples later the container is ended whole.
	var freed time.Duration
	harness.Eventually(t, 20*time.Second, "the memory back: the opener and its sibling ended", func() error {
		if syscall.Kill(sibling, 0) == nil {
			return fmt.Errorf("sibling %d still runs", sibling)
		}
		for _, p := range e.inspect(t, node).Use.Containers {
			if p.Pod == "forker" && p.UsedMiB > 0 {
				return fmt.Errorf("forker still holds %d MiB (over %v, stuck %v)", p.UsedMiB, p.Over, p.Stuck)
			}
		}
		for _, p := range e.inspect(t, node).Use.Unattributed {
			if p.PID == opener {
				return fmt.Errorf("PID %d still listed with %d MiB", opener, p.UsedMiB)
			}
		}
		freed = time.Since(declared)
		return nil
	})
	t.Logf("forker's %d MiB, held by a sibling after its opener was killed, back %v after it was declared", hold, freed.Round(100*time.Millisecond))
	harness.Eventually(t, 30*time.Second, "an Event on forker saying the container was ended", func() error {
		return e.eventSays(ns, "forker", "past its slice under PIDs that had ended", "ended the container")
	})
	harness.Eventually(t, 60*time.Second, "forker restarted under its restart policy", func() error {
		p, err := e.kube.CoreV1().Pods(ns).Get(ctx, "forker", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if restarts(p) < 1 {
			return fmt.Errorf("restarts %d", restarts(p))
		}
		return nil
	})
	if syscall.Kill(neighbour, 0) != nil {
		t.Errorf("the neighbour's process %d, within its slice, is gone", neighbour)
	}
	if p, err := e.kube.CoreV1().Pods(ns).Get(ctx, "neighbour", metav1.GetOptions{}); err != nil || restarts(p) != 0 {
		t.Errorf("neighbour: %v, restarted", err)
	}

	// Memory no pod holds: the leader counts it as used on that GPU.
	host := startHostProcess(t)
	e.declareProcess(t, vgpud, gpu, host, hold, -1)
	t.Cleanup(func() { e.declareProcess(t, vgpud, gpu, host, 0, -1) })
	harness.Eventually(t, 75*time.Second, "the node publishing what its GPU holds beyond bookings", func() error {
		u, err := protocol.DecodeUsage(e.nodeAnnotation(t, node, wellknown.AnnotationUsage))
		if err != nil {
			return err
		}
		for _, h := range u.Held {
			if h.GPU == gpu && h.MiB >= int64(hold) {
				return nil
			}
		}
		return fmt.Errorf("%s's usage holds %+v; want at least %d MiB on %s", node, u.Held, hold, gpu)
	})
	// Room for it in the books (two 2000 MiB slices booked), none on the GPU.
	if out, err := asTenant(pod("big", fmt.Sprint(mem/2), "exec sleep 3603"), "apply", "-f", "-"); err != nil {
		t.Fatalf("create big as the tenant: %v: %s", err, out)
	}
	harness.Eventually(t, 60*time.Second, "big refused: the GPU holds memory nobody booked", func() error {
		return e.eventSays(ns, "big", "held beyond")
	})
	if p, err := e.kube.CoreV1().Pods(ns).Get(ctx, "big", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("big placed on a GPU whose memory is held: %v, node %q", err, p.Spec.NodeName)
	}
	e.declareProcess(t, vgpud, gpu, host, 0, -1)
	e.waitRunning(t, ns, []string{"big"}, 90*time.Second)
	t.Logf("big (%d MiB) waited while a host process held %d MiB of %s (%d MiB), and ran once it was freed", mem/2, hold, gpu, mem)
	_ = e.kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}

// processIn is the host PID of the process of pod's first container
// whose command line is cmdline.
func (e env) processIn(t *testing.T, ns, pod, cmdline string) int {
	t.Helper()
	return e.containerProcess(t, ns, pod, cmdline, func(dir string) bool {
		raw, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		return strings.Join(strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00"), " ") == cmdline
	})
}

// startHostProcess starts a process of no container, ended with the test.
func startHostProcess(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "infinity")
	// Gone with the test process, should it die before its cleanup: the
	// mock keeps a live process's memory from one run to the next.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// nodeAnnotation is node's annotation key now.
func (e env) nodeAnnotation(t *testing.T, node, key string) string {
	t.Helper()
	n, err := e.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Annotations[key]
}

// fullGPU is #50 item 3 as a tenant with edit on the enforcing node:
// five containers, each within its slice plus the node's 1024 MiB
// margin, together hold more than their GPU has. The one furthest past
// its slice loses its process, with an Event that says the GPU was
// full; the others, and the GPU, keep running.
func fullGPU(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	node := nodes[0]
	ns := "e2e-full"
	asTenant := newTenant(t, e, ns)
	snap := e.inspect(t, node)
	if snap.Use == nil || snap.Use.Mode != "enforce" || len(snap.GPUs) < 2 {
		t.Fatalf("%s's GPU usage: %+v, %d GPUs; want mode enforce and two GPUs", node, snap.Use, len(snap.GPUs))
	}
	// The GPU with the least booked, and room for five slices on it.
	booked := map[string]int{}
	for _, a := range snap.Allocations {
		booked[a.GPU] += int(a.MemoryMiB)
	}
	gpu, mem := "", 0
	for _, g := range snap.GPUs[1:] {
		if gpu == "" || booked[g.UUID] < booked[gpu] {
			gpu, mem = g.UUID, int(g.MemoryMiB)
		}
	}
	if booked[gpu] > 0 {
		// What earlier pods book they do not hold (nothing declared): the
		// GPU is full only if the five alone fill it.
		t.Fatalf("no GPU of %s but the first is free of bookings (the least, %s, has %d MiB booked)", node, gpu, booked[gpu])
	}
	slice := mem/5 - 200 // five fit the books with 1000 MiB to spare
	over := []int{900, 700, 600, 500, 400}
	var names []string
	for i := range over {
		name := fmt.Sprintf("full-%d", i)
		names = append(names, name)
		pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, annotations: {nvidia.com/use-gpuuuid: %q}}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: vgpud.local/busybox:1, command: [sleep, "3600"], resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "%d", nvidia.com/gpucores: "10"}}}
`, name, gpu, node, slice)
		if out, err := asTenant(pod, "apply", "-f", "-"); err != nil {
			t.Fatalf("create %s as the tenant: %v: %s", name, err, out)
		}
	}
	e.waitRunning(t, ns, names, 120*time.Second)
	vgpud, err := e.vgpudPod(node)
	if err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for i, n := range names {
		pids[n] = e.containerPID(t, ns, n)
		e.declareProcess(t, vgpud, gpu, pids[n], slice+over[i], -1)
		t.Cleanup(func() { e.declareProcess(t, vgpud, gpu, pids[n], 0, -1) })
	}
	t.Logf("five containers of %d MiB slices hold %d MiB on a %d MiB GPU, each within the 1024 MiB margin", slice, 5*slice+3100, mem)
	harness.Eventually(t, 10*time.Second, "full-0, the furthest past its slice, loses its process", func() error {
		if syscall.Kill(pids["full-0"], 0) == nil {
			return fmt.Errorf("full-0's process %d still runs", pids["full-0"])
		}
		return nil
	})
	harness.Eventually(t, 30*time.Second, "an Event on full-0 saying the GPU was full", func() error {
		return e.eventSays(ns, "full-0", "while the GPU was full", "killed its largest process")
	})
	// Two more periods: a second kill would come by then.
	time.Sleep(2500 * time.Millisecond)
	for _, n := range names[1:] {
		if syscall.Kill(pids[n], 0) != nil {
			t.Errorf("%s's process %d, within its slice plus the margin on a GPU that fits once full-0's is gone, was killed", n, pids[n])
		}
	}
	_ = e.kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}

// heldAcrossRestart is #50 item 4 on the enforcing node: memory left
// under a PID whose process ended (a sibling keeps the descriptor) stays
// charged to the container that opened it when the node role restarts,
// because what the enforcer knows is in its file on the node; a fresh
// start would call it nobody's.
func heldAcrossRestart(t *testing.T, e env, nodes []string) {
	node := nodes[0]
	ns := "e2e-remember"
	asTenant := newTenant(t, e, ns)
	gpu := e.inspect(t, node).GPUs[0].UUID
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: keeper, annotations: {nvidia.com/use-gpuuuid: %q}}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: vgpud.local/busybox:1, command: [sh, -c, "sleep 3604 & sleep 3605 & wait"], resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "2000", nvidia.com/gpucores: "10"}}}
`, gpu, node)
	if out, err := asTenant(pod, "apply", "-f", "-"); err != nil {
		t.Fatalf("create keeper as the tenant: %v: %s", err, out)
	}
	e.waitRunning(t, ns, []string{"keeper"}, 120*time.Second)
	vgpud, err := e.vgpudPod(node)
	if err != nil {
		t.Fatal(err)
	}
	opener := e.processIn(t, ns, "keeper", "sleep 3604")
	e.declareProcess(t, vgpud, gpu, opener, 500, -1) // within its slice: never ended
	t.Cleanup(func() {
		if r, err := e.vgpudPod(node); err == nil {
			e.declareProcess(t, r, gpu, opener, 0, -1)
		}
	})
	charged := func() error {
		u := e.inspect(t, node).Use
		if u == nil {
			return fmt.Errorf("no GPU usage on %s yet", node)
		}
		for _, c := range u.Containers {
			if c.Pod == "keeper" && c.UsedMiB == 500 {
				return nil
			}
		}
		return fmt.Errorf("keeper not charged its 500 MiB: containers %+v, unattributed %+v", u.Containers, u.Unattributed)
	}
	harness.Eventually(t, 15*time.Second, "keeper charged its opener's memory", charged)
	// The opener ends; its sibling keeps the memory listed under its PID.
	if err := syscall.Kill(opener, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 15*time.Second, "keeper still charged, under a PID that ended", charged)
	record := fmt.Sprintf("/var/lib/vgpud/gpu-usage-%s.json", node)
	harness.Eventually(t, 15*time.Second, "the node remembering the PID's first holder in "+record, func() error {
		raw, err := os.ReadFile(record)
		if err != nil {
			return err
		}
		return harness.Contains(string(raw), `"version":1`, fmt.Sprintf(`"pid":%d,`, opener), `"pod":"keeper"`)
	})
	// The mock's process list outlives the pod, as a driver's does.
	took := e.restartNodeRole(t, node)
	harness.Eventually(t, 30*time.Second, "keeper still charged after the node role restarted", charged)
	t.Logf("memory under the ended PID %d stayed keeper's across a restart of the node role (back in %v)", opener, took.Round(time.Second))
}
