//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"math"
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
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/containerenv"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// TestChaosSoak injects faults into the running cluster while a workload
// creates and deletes GPU pods of mixed sizes, and after every round
// checks the invariants (a)–(h) listed in invariants below (and in
// docs/development-test-scenarios.md). Rounds come from
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
	t.Logf("soak on %d nodes: %v", len(e.nodes(t)), e.nodes(t))
	ns := "e2e-chaos"
	e.namespace(t, ns, nil)
	logCtx, stopLogs := context.WithCancel(ctx)
	defer stopLogs()
	logs := e.followNodeLogs(logCtx)
	w := &workload{e: e, ns: ns, maxLive: 20, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))}
	stop := w.start()
	defer stop()

	faults := []fault{
		{name: "SIGKILL the leader", crash: true, leader: true, do: sigkillLeader},
		// On one node there is no replica to hand over to: deleting the
		// leader is then a gap in service, like a crash.
		{name: "delete the leader pod", crash: len(e.nodes(t)) == 1, leader: true, do: deleteLeader},
		{name: "restart kubelet", do: restartKubelet},
		{name: "rolling-restart the DaemonSet", do: rolloutDaemonSet},
		{name: "delete pods between bind and Running", do: w.deleteBetweenBindAndRunning},
		{name: "rotate the CA", do: rotateCA},
	}
	injected := map[string]int{}
	failover := map[string][]time.Duration{} // fault -> time to admission by a serving leader
	seen := map[string]bool{}                // events already counted
	var crashes []window
	violations := map[string][]string{}
	violate := func(inv, what string) {
		violations[inv] = append(violations[inv], what)
		t.Errorf("invariant %s: %s", inv, what)
	}
	for r := range rounds {
		// Two faults a round, in turn: three rounds cover all six.
		for _, f := range []fault{faults[(2*r)%len(faults)], faults[(2*r+1)%len(faults)]} {
			old, _ := e.leader()
			start := time.Now()
			if err := f.do(t, e); err != nil {
				t.Fatalf("round %d: %s: %v", r+1, f.name, err)
			}
			served, recovered := e.recovered(t, ns, old, f.leader)
			injected[f.name]++
			if f.crash {
				crashes = append(crashes, window{start, served})
			}
			if f.leader {
				failover[f.name] = append(failover[f.name], served.Sub(start))
			}
			if f.leader && f.crash {
				// Nobody handed the Lease over: a taker says so. The
				// killed pod's own restarted container may take it back
				// first, as the holder it already was: no change.
				if l, err := e.leader(); err == nil && old != nil && l.Name != old.Name {
					harness.Eventually(t, 30*time.Second, "a LeaseTakenAfterExpiry Event by "+l.Name, func() error { return e.leaseEvent("LeaseTakenAfterExpiry", l.Name, start) })
				} else if err == nil {
					t.Logf("round %d: %s: %s leads again after its restart: the holder did not change", r+1, f.name, l.Name)
				}
			}
			t.Logf("round %d: %s: admission by a serving leader after %v, everything ready after %v", r+1, f.name,
				served.Sub(start).Round(time.Millisecond), recovered.Sub(start).Round(time.Millisecond))
			time.Sleep(5 * time.Second) // the workload runs on between faults
		}
		// Quiesce: no more creates, every live pod must run (g), then the
		// books are compared with the API.
		w.pause()
		e.checkInvariants(t, ns, seen, logs, violate)
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
	for _, name := range []string{"SIGKILL the leader", "delete the leader pod"} {
		d := failover[name]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		t.Logf("failover after %q over %d rounds: p50 %v, max %v", name, len(d), d[len(d)/2].Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond))
	}
	for _, inv := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
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
	"h": "kube-scheduler's extender calls never fail on TLS (CA rotation)",
}

type fault struct {
	name   string
	crash  bool // admission may be down until the failover ends
	leader bool // the leadership moves: its failover time is reported
	do     func(t *testing.T, e env) error
}

type window struct{ from, to time.Time }

func (w window) contains(at time.Time) bool { return !at.Before(w.from) && !at.After(w.to) }

// recovered waits until the cluster serves again. served is when a
// leader (not old, when moved) carried the label, was not terminating, and
// admission answered (a server-side dry run calls the webhook but creates
// nothing); ready is when, besides, every vgpud pod was ready and not
// terminating and every node advertised its GPUs and a serving plugin.
func (e env) recovered(t *testing.T, ns string, old *corev1.Pod, moved bool) (served, ready time.Time) {
	t.Helper()
	ctx := context.Background()
	harness.Eventually(t, recoveryLimit, "the cluster serving again", func() error {
		l, err := e.leader()
		if err != nil {
			return err
		}
		if l.DeletionTimestamp != nil || (moved && old != nil && l.UID == old.UID && restarts(l) == restarts(old)) {
			return fmt.Errorf("leader %s has not handed over", l.Name)
		}
		if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, gpuPod("probe", map[string]string{"nvidia.com/gpumem": "100"}, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			return err
		}
		if served.IsZero() {
			served = time.Now()
		}
		pods, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name in (vgpud, vgpud-scheduler)"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || !podReady(&p) {
				return fmt.Errorf("pod %s not ready", p.Name)
			}
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
			if q.Value() == 0 || n.Annotations[wellknown.AnnotationPlugin] != wellknown.PluginServing {
				return fmt.Errorf("node %s: allocatable %s, plugin %q", n.Name, q.String(), n.Annotations[wellknown.AnnotationPlugin])
			}
		}
		return nil
	})
	return served, time.Now()
}

// recoveryLimit bounds how long a fault may take to recover from. On
// nodes with NRI a rolling restart of the DaemonSet under the workload
// took 157 s in one full run and over 180 s in the next, when the
// workload's pods still had a pod network each (see workload.step) and
// each replica also waited out --shutdown-grace on stopping.
const recoveryLimit = 300 * time.Second

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// rotateCA asks the leader for a new CA and waits until the rotation has
// run its three steps: the Secret trusts one CA, not the old one, and
// kube-scheduler runs with it, in pods started after the last step. The
// Deployment is never written (a GitOps sync would revert it): the
// leader deletes the pods.
func rotateCA(t *testing.T, e env) error {
	ctx := context.Background()
	secrets := e.kube.CoreV1().Secrets(system)
	s, err := secrets.Get(ctx, "vgpud-tls", metav1.GetOptions{})
	if err != nil {
		return err
	}
	d0, err := e.kube.AppsV1().Deployments(system).Get(ctx, "vgpud-scheduler", metav1.GetOptions{})
	if err != nil {
		return err
	}
	pods0, err := schedulerPodUIDs(ctx, e)
	if err != nil {
		return err
	}
	before := string(s.Data["ca.crt"])
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations["vgpud.io/rotate-ca"] = time.Now().Format(time.RFC3339Nano)
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return err
	}
	start := time.Now()
	var written error
	err = harness.Poll(240*time.Second, func() error {
		s, err := secrets.Get(ctx, "vgpud-tls", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ca := string(s.Data["ca.crt"])
		if ca == before || strings.Count(ca, "BEGIN CERTIFICATE") != 1 || len(s.Data["ca-next.key"]) > 0 {
			return fmt.Errorf("ca.crt holds %d CAs", strings.Count(ca, "BEGIN CERTIFICATE"))
		}
		d, err := e.kube.AppsV1().Deployments(system).Get(ctx, "vgpud-scheduler", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Generation != d0.Generation {
			written = fmt.Errorf("the vgpud-scheduler Deployment was written during the rotation (generation %d, was %d)", d.Generation, d0.Generation)
			return nil
		}
		if d.Status.AvailableReplicas != d.Status.Replicas {
			return fmt.Errorf("kube-scheduler not available: %+v", d.Status)
		}
		if s.Annotations["vgpud.io/tls-hash"] == "" || s.Annotations["vgpud.io/tls-hash-since"] == "" {
			return fmt.Errorf("the Secret records no trust for kube-scheduler: %v", s.Annotations)
		}
		since, err := time.Parse(time.RFC3339, s.Annotations["vgpud.io/tls-hash-since"])
		if err != nil {
			return err
		}
		pods, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=vgpud-scheduler"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if pods0[p.UID] || p.DeletionTimestamp != nil || !p.CreationTimestamp.After(since) || !podReady(&p) {
				return fmt.Errorf("kube-scheduler pod %s (created %s) not yet replaced after %s", p.Name, p.CreationTimestamp.UTC().Format(time.RFC3339), since.Format(time.RFC3339))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("CA rotation not done within 240 s: %w", err)
	}
	if written != nil {
		return written
	}
	t.Logf("CA rotated (new CA trusted, signing, old retired; kube-scheduler's pods replaced at each step, its Deployment untouched) in %v", time.Since(start).Round(time.Millisecond))
	return nil
}

func schedulerPodUIDs(ctx context.Context, e env) (map[types.UID]bool, error) {
	pods, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=vgpud-scheduler"})
	if err != nil {
		return nil, err
	}
	uids := map[types.UID]bool{}
	for _, p := range pods.Items {
		uids[p.UID] = true
	}
	return uids, nil
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
		// The daemon, not a `vgpud inspect` exec'd beside it with the
		// same env.
		if !daemon(dir) {
			continue
		}
		return strconv.Atoi(filepath.Base(dir))
	}
	return 0, fmt.Errorf("no vgpud process with POD_NAME=%s on this host", pod)
}

// daemon reports whether the process in /proc dir is `vgpud run`. (The
// pod shares the host's PID namespace, so it is not PID 1 of its own.)
func daemon(dir string) bool {
	cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return false
	}
	args := strings.Split(string(cmdline), "\x00")
	return len(args) > 1 && args[1] == "run"
}

func deleteLeader(t *testing.T, e env) error {
	l, err := e.leader()
	if err != nil {
		return err
	}
	t.Logf("delete pod %s", l.Name)
	return e.kube.CoreV1().Pods(system).Delete(context.Background(), l.Name, metav1.DeleteOptions{})
}

// restartKubelet restarts the kubelet of a node drawn at random.
func restartKubelet(t *testing.T, e env) error {
	nodes := e.nodes(t)
	node := nodes[rand.IntN(len(nodes))]
	t.Logf("restart the kubelet of %s", node)
	states := e.pluginStates(node)
	restarted := time.Now()
	out, err := exec.Command(e.scripts+"/cluster.sh", "restart-kubelet", nodeIndex(node)).CombinedOutput()
	if err != nil {
		states()
		return fmt.Errorf("%v: %s", err, out)
	}
	defer func() {
		seen := states()
		t.Logf("%s's %s from the restart on: %s", node, wellknown.AnnotationPlugin, strings.Join(seen, ", "))
		if !slices.ContainsFunc(seen, func(s string) bool { return strings.HasPrefix(s, wellknown.PluginWaiting+" ") }) {
			t.Errorf("kubelet of %s restarted, but vgpud there never said %q: the leader kept binding to a kubelet that could not admit", node, wellknown.PluginWaiting)
		}
	}()
	// A restarted kubelet may start a container's readiness as failed and
	// probe again within a period (5 s, plus its start-up jitter): until
	// then the pod still shows the old kubelet's Ready. Wait for the new
	// kubelet's own verdict when it gives one, so the next fault (a rollout
	// counts unready nodes) does not meet this one's tail.
	err = harness.Poll(15*time.Second, func() error {
		pods, err := e.kube.CoreV1().Pods(system).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node", FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return err
		}
		for i := range pods.Items {
			for _, c := range pods.Items[i].Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.Before(&metav1.Time{Time: restarted.Truncate(time.Second)}) {
					return nil
				}
			}
		}
		return fmt.Errorf("no Ready transition on %s's vgpud pod since the restart", node)
	})
	if err != nil {
		t.Logf("the restarted kubelet kept the vgpud pod on %s as it was (%v)", node, err)
	}
	return nil
}

// pluginStates records each value node's vgpud.io/plugin takes, and
// when, until the returned func is called. It polls: a state lasts at
// least the round trip of the node role's patch.
func (e env) pluginStates(node string) (stop func() []string) {
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := ""
		for ctx.Err() == nil {
			n, err := e.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err == nil && n.Annotations[wellknown.AnnotationPlugin] != last {
				last = n.Annotations[wellknown.AnnotationPlugin]
				seen = append(seen, fmt.Sprintf("%s after %v", last, time.Since(start).Round(time.Millisecond)))
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() []string {
		cancel()
		<-done
		return seen
	}
}

// rolloutDaemonSet restarts the DaemonSet as an upgrade would, and checks
// that it goes one node at a time: never two nodes without a ready vgpud
// pod at once.
func rolloutDaemonSet(t *testing.T, e env) error {
	nodes := e.nodes(t)
	ctx, cancel := context.WithCancel(context.Background())
	worst := make(chan []string)
	go func() {
		var most []string
		for ctx.Err() == nil {
			if down := e.nodesWithoutReadyVgpud(ctx, nodes); len(down) > len(most) {
				most = down
			}
			time.Sleep(200 * time.Millisecond)
		}
		worst <- most
	}()
	_, err := e.kubectl("-n", system, "rollout", "restart", "ds/vgpud")
	if err == nil {
		_, err = e.kubectl("-n", system, "rollout", "status", "ds/vgpud", "--timeout="+recoveryLimit.String())
	}
	cancel()
	most := <-worst
	t.Logf("rollout: at most %d of %d nodes without a ready vgpud pod at once %v", len(most), len(nodes), most)
	if err == nil && len(most) > 1 {
		err = fmt.Errorf("the rollout left %v without a ready vgpud pod at once; want one node at a time", most)
	}
	return err
}

// nodesWithoutReadyVgpud names the nodes with no ready, non-terminating
// vgpud pod; none when the list fails.
func (e env) nodesWithoutReadyVgpud(ctx context.Context, nodes []string) []string {
	pods, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"})
	if err != nil {
		return nil
	}
	ready := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && podReady(p) {
			ready[p.Spec.NodeName] = true
		}
	}
	var down []string
	for _, n := range nodes {
		if !ready[n] {
			down = append(down, n)
		}
	}
	return down
}

// checkInvariants waits for every live pod to run, then checks (a)–(e), (g)
// and (h) (invariants); (f) is judged from the refusals at the end.
func (e env) checkInvariants(t *testing.T, ns string, seen map[string]bool, logs *nodeLogs, violate func(inv, what string)) {
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
		for _, p := range pods {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodPending {
				evs, _ := e.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
				for _, ev := range evs.Items {
					t.Logf("%s: %s %s (%s, x%d)", p.Name, ev.Reason, ev.Message, ev.LastTimestamp.Format("15:04:05"), ev.Count)
				}
			}
		}
	}
	for _, p := range pods {
		// A pod the workload deleted ends Failed too (its sleep is killed).
		if p.Status.Phase == corev1.PodFailed && p.DeletionTimestamp == nil {
			violate("e", fmt.Sprintf("%s failed: %s: %s", p.Name, p.Status.Reason, p.Status.Message))
			e.explain(t, logs, p.Spec.NodeName, p.Name)
		}
	}
	// (h) an extender call that failed on TLS shows as FailedScheduling.
	evs, err := e.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if strings.Contains(ev.Message, "x509") || strings.Contains(ev.Message, "tls:") || strings.Contains(ev.Message, "certificate") {
			if !seen[string(ev.UID)] {
				seen[string(ev.UID)] = true
				violate("h", fmt.Sprintf("%s: %s", ev.InvolvedObject.Name, ev.Message))
			}
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
				// events.k8s.io Events carry no source host: the pod names the node.
				node := ev.Source.Host
				if p, err := e.kube.CoreV1().Pods(ev.Namespace).Get(ctx, ev.InvolvedObject.Name, metav1.GetOptions{}); err == nil {
					node = p.Spec.NodeName
				}
				e.explain(t, logs, node, ev.InvolvedObject.Name)
			}
		}
	}
	// (a) capacity, summed from the assignments of non-terminated pods.
	for _, over := range oversubscribed(t, e) {
		violate("a", over)
	}
	// (b) env equals assignment, for every running GPU container.
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
		if err != nil || len(a.Containers) != 1 {
			violate("b", fmt.Sprintf("%s runs without a usable assignment: %v", p.Name, err))
			continue
		}
		env := e.containerEnv(t, ns, p.Name)
		var uuids []string
		for i, g := range a.Containers[0].GPUs {
			uuids = append(uuids, g.UUID)
			if got, want := env[containerenv.EnvMemoryLimitPrefix+strconv.Itoa(i)], fmt.Sprintf("%dm", g.MemoryMiB); got != want {
				violate("b", fmt.Sprintf("%s: %s%d=%s, assignment says %s", p.Name, containerenv.EnvMemoryLimitPrefix, i, got, want))
			}
		}
		if got, want := env[containerenv.EnvVisibleDevices], strings.Join(uuids, ","); got != want {
			violate("b", fmt.Sprintf("%s: %s=%s, assignment says %s", p.Name, containerenv.EnvVisibleDevices, got, want))
		}
	}
	// (c) the leader's books, from its metrics, equal the API's sum. A pod
	// deleted a moment ago may still be counted: give the books time.
	if err := harness.Poll(60*time.Second, e.booksMatch); err != nil {
		violate("c", err.Error())
	}
}

// booksMatch compares the leader's per-GPU gauges with the usage summed
// from the API.
func (e env) booksMatch() error {
	l, err := e.leader()
	if err != nil {
		return err
	}
	raw, err := e.scrape(l)
	if err != nil {
		return fmt.Errorf("leader %s metrics: %w", l.Name, err)
	}
	books := map[string]*use{}
	fields := map[string]func(u *use, v float64){
		"vgpud_gpu_allocated_memory_bytes": func(u *use, v float64) { u.MemMiB = int64(v) >> 20 },
		"vgpud_gpu_allocated_cores_ratio":  func(u *use, v float64) { u.Cores = int(math.Round(v * 100)) },
		"vgpud_gpu_allocated_slots":        func(u *use, v float64) { u.Slices = int(v) },
	}
	for metric, set := range fields {
		values, _, err := harness.MetricSums(strings.NewReader(raw), metric, func(l map[string]string) string { return l["uuid"] })
		if err != nil {
			return fmt.Errorf("leader %s metrics: %w", l.Name, err)
		}
		for uuid, v := range values {
			if books[uuid] == nil {
				books[uuid] = &use{}
			}
			set(books[uuid], v)
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

// workloadStep is how often the workload creates a pod (and, at maxLive,
// deletes its oldest). At one a second the three nodes on this machine
// fell behind: 138 of the workload's pods were still Terminating when a
// rollout timed out. At one every 2-3 s (plain pods, by hand) the number
// Terminating stayed near 7.
const workloadStep = 2 * time.Second

func (w *workload) start() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(workloadStep)
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
	pod := gpuPod(name, limits, nil)
	// The three nodes share this machine's one kernel and two cores. At a
	// pod every 500 ms, each with its own network namespace and token
	// mount, the CNI plugins queued on the kernel's rtnl lock and runc on
	// its mount lock (dozens in D state, load above 150), containerd took
	// minutes to reap an exited container, and a rolling vgpud pod waited
	// that long for its own sandbox. The soak is about GPUs: its pods
	// share the node's network, mount no token, and come slower
	// (workloadStep).
	pod.Spec.HostNetwork = true
	pod.Spec.AutomountServiceAccountToken = new(bool)
	at := time.Now()
	_, err := w.e.kube.CoreV1().Pods(w.ns).Create(ctx, pod, metav1.CreateOptions{})
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
