//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/scripts/harness"
)

// TestChaosSoak injects faults into the running cluster while a workload
// creates and deletes GPU pods of mixed sizes, and after every round
// checks the invariants (a)–(g) of the faults issue. Rounds come from
// VGPUD_CHAOS_ROUNDS (make test: 3, every fault at least once; make chaos
// ROUNDS=N for longer).
func TestChaosSoak(t *testing.T) {
	e := setup(t)
	rounds := 3
	if v := os.Getenv("VGPUD_CHAOS_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("VGPUD_CHAOS_ROUNDS=%q: want a positive number of rounds", v)
		}
		rounds = n
	}
	ctx := context.Background()
	if _, err := e.kube.AppsV1().DaemonSets(system).Get(ctx, "vgpud", metav1.GetOptions{}); err != nil {
		if out, err := exec.Command(e.scripts + "/install.sh").CombinedOutput(); err != nil {
			t.Fatalf("install: %v\n%s", err, out)
		}
	}
	nodes, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	ns := "e2e-chaos"
	e.namespace(t, ns, nil)
	w := &workload{e: e, ns: ns, maxLive: 20, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))}
	stop := w.start()
	defer stop()

	faults := []fault{
		{name: "SIGKILL the leader", crash: true, do: sigkillLeader},
		{name: "delete the leader pod", do: deleteLeader},
		{name: "restart kubelet", do: restartKubelet},
		{name: "rolling-restart the DaemonSet", do: rolloutDaemonSet},
		{name: "delete pods between bind and Running", do: w.deleteBetweenBindAndRunning},
	}
	injected := map[string]int{}
	seen := map[string]bool{} // events already counted
	var crashes []window
	violations := map[string][]string{}
	violate := func(inv, what string) {
		violations[inv] = append(violations[inv], what)
		t.Errorf("invariant %s: %s", inv, what)
	}
	for r := range rounds {
		// Two faults a round, in turn: three rounds cover all five.
		for _, f := range []fault{faults[(2*r)%len(faults)], faults[(2*r+1)%len(faults)]} {
			start := time.Now()
			if err := f.do(t, e); err != nil {
				t.Fatalf("round %d: %s: %v", r+1, f.name, err)
			}
			recovered := e.recovered(t, ns)
			injected[f.name]++
			if f.crash {
				crashes = append(crashes, window{start, recovered})
			}
			t.Logf("round %d: %s: recovered (leader labelled, DaemonSet ready, admission answering) %v after the fault", r+1, f.name, recovered.Sub(start).Round(time.Millisecond))
		}
		// Quiesce: no more creates, every live pod must run (g), then the
		// books are compared with the API.
		w.pause()
		e.checkInvariants(t, ns, nodes.Items[0].Name, seen, violate)
		w.resume()
	}
	stop()

	created, refused := w.results()
	var inWindow, planned []string
	for _, r := range refused {
		if slices.ContainsFunc(crashes, func(c window) bool { return c.contains(r.at) }) {
			inWindow = append(inWindow, r.err)
		} else {
			planned = append(planned, fmt.Sprintf("%s: %s", r.at.Format("15:04:05.000"), r.err))
		}
	}
	for _, p := range planned {
		violate("f", "create refused outside a crash's failover window: "+p)
	}
	var names []string
	for _, f := range faults {
		names = append(names, fmt.Sprintf("%s ×%d", f.name, injected[f.name]))
	}
	t.Logf("chaos soak: %d rounds; faults injected: %s; %d GPU pods created; creates refused: %d inside SIGKILL failover windows, %d outside",
		rounds, strings.Join(names, ", "), created, len(inWindow), len(planned))
	for _, inv := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		t.Logf("invariant %s (%s): %d violations", inv, invariants[inv], len(violations[inv]))
	}
}

var invariants = map[string]string{
	"a": "no GPU over capacity, from the assignments",
	"b": "every running GPU container's env equals its assignment",
	"c": "the leader's books equal the API",
	"d": "PodResources agrees with the assignments",
	"e": "no pod failed with UnexpectedAdmissionError",
	"f": "no create refused during a planned restart",
	"g": "every pod that fits runs",
}

type fault struct {
	name  string
	crash bool // admission may be down until the failover ends
	do    func(t *testing.T, e env) error
}

type window struct{ from, to time.Time }

func (w window) contains(at time.Time) bool { return !at.Before(w.from) && !at.After(w.to) }

// recovered waits until the cluster serves again: one leader labelled, the
// DaemonSet ready, the node advertising its GPUs, and admission answering
// (a server-side dry run calls the webhook but creates nothing).
func (e env) recovered(t *testing.T, ns string) time.Time {
	t.Helper()
	ctx := context.Background()
	harness.Eventually(t, 180*time.Second, "the cluster serving again", func() error {
		if _, err := e.leader(); err != nil {
			return err
		}
		ds, err := e.kube.AppsV1().DaemonSets(system).Get(ctx, "vgpud", metav1.GetOptions{})
		if err != nil || ds.Status.NumberReady != ds.Status.DesiredNumberScheduled || ds.Status.UpdatedNumberScheduled != ds.Status.DesiredNumberScheduled {
			return fmt.Errorf("DaemonSet %+v %v", ds.Status, err)
		}
		nodes, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, n := range nodes.Items {
			q := n.Status.Allocatable["nvidia.com/gpu"]
			if q.Value() == 0 || n.Annotations[protocol.AnnotationPlugin] != protocol.PluginServing {
				return fmt.Errorf("node %s: allocatable %s, plugin %q", n.Name, q.String(), n.Annotations[protocol.AnnotationPlugin])
			}
		}
		_, err = e.kube.CoreV1().Pods(ns).Create(ctx, gpuPod("probe", map[string]string{"nvidia.com/gpumem": "100"}, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	return time.Now()
}

func sigkillLeader(t *testing.T, e env) error {
	l, err := e.leader()
	if err != nil {
		return err
	}
	pid, err := hostPID(l.Name)
	if err != nil {
		return err
	}
	t.Logf("SIGKILL %s (host pid %d)", l.Name, pid)
	return syscall.Kill(pid, syscall.SIGKILL)
}

// hostPID finds the vgpud process of a pod among this host's processes
// (the cluster shares the host's PID namespace): its env names the pod.
func hostPID(pod string) (int, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/comm")
	if err != nil {
		return 0, err
	}
	for _, comm := range procs {
		name, err := os.ReadFile(comm)
		if err != nil || strings.TrimSpace(string(name)) != "vgpud" {
			continue
		}
		dir := filepath.Dir(comm)
		env, err := os.ReadFile(filepath.Join(dir, "environ"))
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), "POD_NAME="+pod) {
			continue
		}
		return strconv.Atoi(filepath.Base(dir))
	}
	return 0, fmt.Errorf("no vgpud process with POD_NAME=%s on this host", pod)
}

func deleteLeader(t *testing.T, e env) error {
	l, err := e.leader()
	if err != nil {
		return err
	}
	t.Logf("delete pod %s", l.Name)
	return e.kube.CoreV1().Pods(system).Delete(context.Background(), l.Name, metav1.DeleteOptions{})
}

func restartKubelet(t *testing.T, e env) error {
	out, err := exec.Command(e.scripts+"/cluster.sh", "restart-kubelet").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func rolloutDaemonSet(t *testing.T, e env) error {
	if _, err := e.kubectl("-n", system, "rollout", "restart", "ds/vgpud"); err != nil {
		return err
	}
	_, err := e.kubectl("-n", system, "rollout", "status", "ds/vgpud", "--timeout=180s")
	return err
}

// checkInvariants waits for every live pod to run, then checks (a)–(e) and
// (g) of the faults issue.
func (e env) checkInvariants(t *testing.T, ns, node string, seen map[string]bool, violate func(inv, what string)) {
	t.Helper()
	ctx := context.Background()
	var pods []corev1.Pod
	err := harness.Poll(180*time.Second, func() error {
		list, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		pods = list.Items
		for _, p := range pods {
			if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodFailed {
				return fmt.Errorf("%s is %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName)
			}
		}
		return nil
	})
	if err != nil {
		violate("g", "live pods not all running within 180 s: "+err.Error())
	}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodFailed {
			violate("e", fmt.Sprintf("%s failed: %s: %s", p.Name, p.Status.Reason, p.Status.Message))
		}
	}
	// (e) also from the events: the workload may have deleted a failed pod.
	for _, reason := range []string{"UnexpectedAdmissionError", "DevicesDisagree"} {
		evs, err := e.kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Items {
			if ev.Namespace != ns && reason == "UnexpectedAdmissionError" {
				continue
			}
			inv := map[string]string{"UnexpectedAdmissionError": "e", "DevicesDisagree": "d"}[reason]
			what := fmt.Sprintf("%s on %s/%s: %s", reason, ev.Namespace, ev.InvolvedObject.Name, ev.Message)
			if !seen[string(ev.UID)] {
				seen[string(ev.UID)] = true
				violate(inv, what)
			}
		}
	}
	// (a) capacity, summed from the assignments of non-terminated pods.
	for _, over := range oversubscribed(t, e, node) {
		violate("a", over)
	}
	// (b) env equals assignment, for every running GPU container.
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		a, err := protocol.DecodeAssignment(p.Annotations[protocol.AnnotationAssignment])
		if err != nil || len(a.Containers) != 1 {
			violate("b", fmt.Sprintf("%s runs without a usable assignment: %v", p.Name, err))
			continue
		}
		env := e.containerEnv(t, ns, p.Name)
		var uuids []string
		for i, g := range a.Containers[0].GPUs {
			uuids = append(uuids, g.UUID)
			if got, want := env[protocol.EnvMemoryLimitPrefix+strconv.Itoa(i)], fmt.Sprintf("%dm", g.MemoryMiB); got != want {
				violate("b", fmt.Sprintf("%s: %s%d=%s, assignment says %s", p.Name, protocol.EnvMemoryLimitPrefix, i, got, want))
			}
		}
		if got, want := env[protocol.EnvVisibleDevices], strings.Join(uuids, ","); got != want {
			violate("b", fmt.Sprintf("%s: %s=%s, assignment says %s", p.Name, protocol.EnvVisibleDevices, got, want))
		}
	}
	// (c) the leader's books, from its metrics, equal the API's sum. A pod
	// deleted a moment ago may still be counted: give the books time.
	if err := harness.Poll(60*time.Second, func() error { return e.booksMatch(node) }); err != nil {
		violate("c", err.Error())
	}
}

// booksMatch compares the leader's per-GPU gauges with the usage summed
// from the API.
func (e env) booksMatch(node string) error {
	l, err := e.leader()
	if err != nil {
		return err
	}
	raw, err := e.kube.CoreV1().Pods(system).ProxyGet("http", l.Name, "9090", "metrics", nil).DoRaw(context.Background())
	if err != nil {
		return fmt.Errorf("leader %s metrics: %w", l.Name, err)
	}
	books := map[string]*use{}
	for _, line := range strings.Split(string(raw), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || !strings.HasPrefix(name, "vgpud_gpu_allocated_") {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		_, uuid, _ := strings.Cut(labels, `uuid="`)
		uuid, _, _ = strings.Cut(uuid, `"`)
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return fmt.Errorf("metric line %q: %w", line, err)
		}
		u := books[uuid]
		if u == nil {
			u = &use{}
			books[uuid] = u
		}
		switch name {
		case "vgpud_gpu_allocated_memory_mib":
			u.mem = int64(v)
		case "vgpud_gpu_allocated_cores":
			u.cores = int(v)
		case "vgpud_gpu_allocated_slots":
			u.slices = int(v)
		}
	}
	api, err := apiUsage(e)
	if err != nil {
		return err
	}
	var diff []string
	for uuid, u := range api {
		if b := books[uuid]; b == nil || *b != *u {
			diff = append(diff, fmt.Sprintf("%s: books %+v, API %+v", uuid, b, *u))
		}
	}
	for uuid, b := range books {
		if api[uuid] == nil && *b != (use{}) {
			diff = append(diff, fmt.Sprintf("%s: books %+v, API nothing", uuid, *b))
		}
	}
	if len(diff) > 0 {
		return fmt.Errorf("leader %s's books differ from the API: %s", l.Name, strings.Join(diff, "; "))
	}
	return nil
}

// workload creates GPU pods of mixed sizes at about two a second, keeps at
// most maxLive, deleting the oldest, and records every refused create.
type workload struct {
	e       env
	ns      string
	maxLive int
	rng     *rand.Rand

	mu      sync.Mutex
	paused  bool
	live    []string
	created int
	refused []refusal
}

type refusal struct {
	at  time.Time
	err string
}

func (w *workload) start() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			w.step(ctx, n)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

func (w *workload) step(ctx context.Context, n int) {
	w.mu.Lock()
	if w.paused {
		w.mu.Unlock()
		return
	}
	var oldest string
	if len(w.live) >= w.maxLive {
		oldest, w.live = w.live[0], w.live[1:]
	}
	gpus := 1
	if w.rng.IntN(10) < 3 {
		gpus = 2
	}
	mem := []int{500, 1000, 2000, 3000}[w.rng.IntN(4)]
	cores := []int{0, 0, 5, 10}[w.rng.IntN(4)]
	w.mu.Unlock()
	if oldest != "" {
		_ = w.e.kube.CoreV1().Pods(w.ns).Delete(ctx, oldest, metav1.DeleteOptions{})
	}
	name := fmt.Sprintf("w-%04d", n)
	limits := map[string]string{"nvidia.com/gpu": strconv.Itoa(gpus), "nvidia.com/gpumem": strconv.Itoa(mem)}
	if cores > 0 {
		limits["nvidia.com/gpucores"] = strconv.Itoa(cores)
	}
	at := time.Now()
	_, err := w.e.kube.CoreV1().Pods(w.ns).Create(ctx, gpuPod(name, limits, nil), metav1.CreateOptions{})
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			w.refused = append(w.refused, refusal{at: at, err: err.Error()})
		}
		return
	}
	w.created++
	w.live = append(w.live, name)
}

func (w *workload) pause() {
	w.mu.Lock()
	w.paused = true
	w.mu.Unlock()
	time.Sleep(600 * time.Millisecond) // a step in flight finishes
}

func (w *workload) resume() {
	w.mu.Lock()
	w.paused = false
	w.mu.Unlock()
}

func (w *workload) results() (int, []refusal) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.created, slices.Clone(w.refused)
}

// deleteBetweenBindAndRunning deletes pods the scheduler has bound but
// kubelet has not started: the window where a pod holds a booking and an
// Allocate may be in flight.
func (w *workload) deleteBetweenBindAndRunning(t *testing.T, e env) error {
	ctx := context.Background()
	deleted := 0
	err := harness.Poll(20*time.Second, func() error {
		list, err := e.kube.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodPending && p.DeletionTimestamp == nil {
				if err := e.kube.CoreV1().Pods(w.ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err == nil {
					deleted++
				}
			}
		}
		if deleted < 2 {
			return fmt.Errorf("%d deleted so far", deleted)
		}
		return nil
	})
	t.Logf("deleted %d pods between bind and Running", deleted)
	if deleted == 0 {
		return fmt.Errorf("no pod seen between bind and Running in 20 s: %w", err)
	}
	return nil
}
