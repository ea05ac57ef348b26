//go:build e2e

package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/scripts/harness"
)

// gpuUsage: the first node enforces each container's GPU memory
// (the default, auto, on a node where the runtime hook runs). A
// tenant's container whose real process is declared on the mock GPU past
// its slice loses that process within 2 s, with an Event; its co-tenant
// on the same GPU, a host process and another node's container, declared
// on that GPU too, are reported and never killed; inspect, inspect
// --cluster and the metrics show each.
func gpuUsage(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	node := nodes[0]
	ns := "e2e-usage"
	asTenant := newTenant(t, e, ns)
	snap := e.inspect(t, node)
	if snap.Use == nil || snap.Use.Mode != "enforce" {
		t.Fatalf("%s's GPU usage: %+v; want mode enforce (the default, auto, where the runtime hook runs)", node, snap.Use)
	}
	gpu := snap.GPUs[0].UUID
	pod := func(name, onNode, annotations string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  annotations: {%s}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: vgpud.local/busybox:1
    command: [sleep, "3600"]
    resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "1000", nvidia.com/gpucores: "20"}}
`, name, annotations, onNode)
	}
	pinned := fmt.Sprintf("nvidia.com/use-gpuuuid: %q", gpu)
	names := []string{"greedy", "neighbour"}
	for _, n := range names {
		if out, err := asTenant(pod(n, node, pinned), "apply", "-f", "-"); err != nil {
			t.Fatalf("create %s as the tenant: %v: %s", n, err, out)
		}
	}
	if len(nodes) > 1 {
		if out, err := asTenant(pod("elsewhere", nodes[1], ""), "apply", "-f", "-"); err != nil {
			t.Fatalf("create elsewhere as the tenant: %v: %s", err, out)
		}
		names = append(names, "elsewhere")
	}
	e.waitRunning(t, ns, names, 120*time.Second)

	// A host process: no container's.
	host := startHostProcess(t)

	vgpud, err := e.vgpudPod(node)
	if err != nil {
		t.Fatal(err)
	}
	declare := func(pid, mib, sm int) {
		t.Helper()
		e.declareProcess(t, vgpud, gpu, pid, mib, sm)
	}
	pids := map[string]int{}
	for _, n := range names {
		pids[n] = e.containerPID(t, ns, n)
	}
	// greedy's kill counter, from 0 since its grant; a pod of the same
	// name from an earlier run on this cluster may have left it higher.
	greedyKills := func() float64 {
		t.Helper()
		raw, err := e.scrape(vgpud)
		if err != nil {
			t.Fatal(err)
		}
		v, _, err := harness.MetricSums(strings.NewReader(raw), "vgpud_node_container_gpu_kills_total", func(l map[string]string) string {
			return l["namespace"] + "/" + l["pod_name"] + "/" + l["container"] + "/" + l["uuid"]
		})
		if err != nil {
			t.Fatal(err)
		}
		return v[ns+"/greedy/main/"+gpu]
	}
	killsBefore := greedyKills()
	declare(host, 3000, 10)
	declare(pids["neighbour"], 900, 20)
	if pid, ok := pids["elsewhere"]; ok {
		declare(pid, 4000, 5)
	}
	// Past its 1000 MiB slice and the node's 1024 MiB margin.
	declare(pids["greedy"], 2600, 60)
	declared := time.Now()
	var gone time.Duration
	for gone == 0 && time.Since(declared) < 10*time.Second {
		if errors.Is(syscall.Kill(pids["greedy"], 0), syscall.ESRCH) {
			gone = time.Since(declared)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if gone == 0 || gone > 2*time.Second {
		t.Errorf("greedy's process %d over its slice: gone after %v; want within 2 s (the node samples every second)", pids["greedy"], gone)
	}
	t.Logf("greedy's process (2600 MiB on a 1000 MiB slice, margin 1024 MiB) killed %v after it was declared", gone.Round(time.Millisecond))

	harness.Eventually(t, 30*time.Second, "an Event on greedy naming the kill", func() error {
		evs, err := e.kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.Regarding.Name == "greedy" && ev.Reason == "GPUMemoryOverSlice" {
				t.Logf("Event: %s", ev.Note)
				return harness.Contains(ev.Note, "2600 MiB", "slice of 1000 MiB", "killed", "first process")
			}
		}
		return fmt.Errorf("no GPUMemoryOverSlice Event on greedy")
	})
	harness.Eventually(t, 60*time.Second, "greedy restarted under its restart policy", func() error {
		p, err := e.kube.CoreV1().Pods(ns).Get(ctx, "greedy", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if restarts(p) < 1 {
			return fmt.Errorf("restarts %d", restarts(p))
		}
		return nil
	})
	// Everyone else keeps running.
	for _, pid := range []int{pids["neighbour"], host, pids["elsewhere"]} {
		if pid != 0 && syscall.Kill(pid, 0) != nil {
			t.Errorf("process %d, which vgpud must not kill, is gone", pid)
		}
	}
	for _, n := range names[1:] {
		p, err := e.kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil || restarts(p) != 0 || p.Status.Phase != corev1.PodRunning {
			t.Errorf("%s: %v, restarts %d, phase %s", n, err, restarts(p), p.Status.Phase)
		}
	}

	// inspect: the neighbour's use against its slice, greedy's kill, and
	// the host's and the other node's processes unattributed.
	harness.Eventually(t, 30*time.Second, "inspect showing the sample", func() error {
		u := e.inspect(t, node).Use
		if u == nil {
			return fmt.Errorf("no GPU usage in %s's inspect (vgpud restarting?)", node)
		}
		var sawNeighbour, sawKill bool
		unattributed := map[int]bool{}
		for _, c := range u.Containers {
			if c.Pod == "neighbour" && c.UsedMiB == 900 && c.SliceMiB == 1000 && c.SMPercent == 20 && c.Cores == 20 && !c.Over {
				sawNeighbour = true
			}
			if c.Pod == "greedy" && c.Kills > 0 {
				sawKill = true
			}
		}
		for _, p := range u.Unattributed {
			unattributed[p.PID] = true
		}
		switch {
		case !sawNeighbour:
			return fmt.Errorf("neighbour at 900/1000 MiB, 20%% SM not shown: %+v", u.Containers)
		case !unattributed[host]:
			return fmt.Errorf("host process %d not unattributed: %+v", host, u.Unattributed)
		case pids["elsewhere"] != 0 && !unattributed[pids["elsewhere"]]:
			return fmt.Errorf("%s's process %d not unattributed: %+v", nodes[1], pids["elsewhere"], u.Unattributed)
		}
		_ = sawKill // greedy's restarted container holds nothing: it may have left the sample
		return nil
	})
	metrics, err := e.scrape(vgpud)
	if err != nil {
		t.Fatal(err)
	}
	if got := greedyKills(); got != killsBefore+1 {
		t.Errorf("%s's vgpud_node_container_gpu_kills_total for greedy: %v, want %v", node, got, killsBefore+1)
	}
	for _, want := range []string{
		`vgpud_node_container_gpu_memory_used_bytes{container="main",namespace="e2e-usage",pod_name="neighbour",uuid="` + gpu + `"} 9.437184e+08`,
		`vgpud_node_container_gpu_memory_limit_bytes{container="main",namespace="e2e-usage",pod_name="neighbour",uuid="` + gpu + `"} 1.048576e+09`,
		`vgpud_node_container_gpu_sm_ratio{container="main",namespace="e2e-usage",pod_name="neighbour",uuid="` + gpu + `"} 0.2`,
		`vgpud_node_gpu_unattributed_memory_bytes{uuid="` + gpu + `"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("%s's metrics lack %s", node, want)
		}
	}
	// inspect --cluster (kubectl vgpud), from what the node published to
	// its vgpud.io/usage annotation (at most every 30 s).
	harness.Eventually(t, 75*time.Second, "kubectl vgpud showing the node's GPU usage", func() error {
		cmd := exec.Command("kubectl", "get", "node", node, "-o", "jsonpath={.metadata.annotations.vgpud\\.io/usage}")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
		if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), "neighbour") {
			return fmt.Errorf("vgpud.io/usage on %s: %v %s", node, err, out)
		}
		return harness.Contains(e.kubectlVgpud(t), node+" (enforce)", ns+"/neighbour", "896/1000", "20/20", "unattributed")
	})
	for _, pid := range []int{host, pids["neighbour"], pids["elsewhere"]} {
		if pid != 0 {
			declare(pid, 0, -1)
		}
	}
	// The kill above ran with the manifest's security context: the
	// daemon holds CAP_KILL and no other capability, cannot gain more,
	// and runs under the runtime's seccomp filter.
	replica, err := e.vgpudPod(node)
	if err != nil {
		t.Fatal(err)
	}
	daemonPID, err := hostPID(replica.Name)
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", daemonPID))
	if err != nil {
		t.Fatal(err)
	}
	const capKill = "0000000000000020" // 1 << 5
	if err := harness.Contains(string(status), "CapEff:\t"+capKill, "CapBnd:\t"+capKill, "NoNewPrivs:\t1", "Seccomp:\t2"); err != nil {
		t.Errorf("vgpud on %s (pod %s, host pid %d): %v", node, replica.Name, daemonPID, err)
	}
}

// declareProcess tells the mock GPU backend of replica's node that host
// process pid holds mib MiB and sm % of SM time on gpu (mib 0: none).
func (e env) declareProcess(t *testing.T, replica *corev1.Pod, gpu string, pid, mib, sm int) {
	t.Helper()
	spec := fmt.Sprintf("%s:%d:%d:%d", gpu, pid, mib, sm)
	if out, err := e.kubectl("-n", system, "exec", replica.Name, "--", "vgpud", "inspect", "--mock-process", spec); err != nil {
		t.Fatalf("declare %s on %s: %v: %s", spec, replica.Spec.NodeName, err, out)
	}
}

// containerPID is the host PID of the sleep process of pod's first
// container (the cluster shares the host's PID namespace).
func (e env) containerPID(t *testing.T, ns, pod string) int {
	t.Helper()
	return e.containerProcess(t, ns, pod, "a sleep", func(dir string) bool {
		comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
		return strings.TrimSpace(string(comm)) == "sleep"
	})
}

// containerProcess is the host PID of a process of pod's first
// container for which is, given the process's /proc directory, says yes:
// found by the container ID kubelet reports, in the cgroup of a process
// on this host.
func (e env) containerProcess(t *testing.T, ns, pod, what string, is func(dir string) bool) int {
	t.Helper()
	p, err := e.kube.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil || len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s: %v", pod, err)
	}
	_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, f := range procs {
		cg, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(cg), id) || !is(filepath.Dir(f)) {
			continue
		}
		var pid int
		fmt.Sscan(filepath.Base(filepath.Dir(f)), &pid)
		return pid
	}
	t.Fatalf("no process (%s) of %s's container %s on this host", what, pod, id)
	return 0
}
