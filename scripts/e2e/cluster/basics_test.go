//go:build e2e

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/inspectv1"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// installWithChart installs vgpud with the Helm chart, checks that it serves
// on every node, and returns the nodes.
func installWithChart(t *testing.T, e env) (nodes []string) {
	ctx := context.Background()
	// With the Helm chart, as docs/install-helm.md does it;
	// the manifest's kubectl apply installs the fallback node's
	// (TestFallback) and the demo. The chart's defaults render the
	// manifest object for object (make chart).
	start := time.Now()
	install := exec.Command(e.scripts + "/install.sh")
	install.Env = append(os.Environ(), "VGPUD_INSTALL=chart", "VGPUD_FULLNAME="+e.fullname)
	out, err := install.CombinedOutput()
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	t.Logf("helm upgrade --install -> vgpud serving: %v", time.Since(start).Round(time.Millisecond))
	if release, err := e.kube.CoreV1().Secrets(system).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=vgpud,status=deployed"}); err != nil || len(release.Items) == 0 {
		t.Fatalf("no deployed Helm release vgpud in %s: %v", system, err)
	}
	// Helm made the namespace (--create-namespace); the chart's hook
	// labelled it as the manifest's Namespace is, and went.
	ns, err := e.kube.CoreV1().Namespaces().Get(ctx, system, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"pod-security.kubernetes.io/enforce": "privileged", "vgpud.io/webhook": "ignore"} {
		if ns.Labels[k] != v {
			t.Errorf("namespace %s: label %s=%q, want %q (labels %v)", system, k, ns.Labels[k], v, ns.Labels)
		}
	}
	if jobs, err := e.kube.BatchV1().Jobs(system).List(ctx, metav1.ListOptions{}); err != nil || len(jobs.Items) > 0 {
		t.Errorf("the namespace-labels hook left %v (%v)", jobs, err)
	}
	if _, err := e.kube.CoreV1().ServiceAccounts(system).Get(ctx, e.name("-namespace-labels"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the namespace-labels hook left its ServiceAccount (%v)", err)
	}
	if _, err := e.kube.RbacV1().ClusterRoleBindings().Get(ctx, e.name("-namespace-labels-")+system, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the namespace-labels hook left its ClusterRoleBinding (%v)", err)
	}
	// The chart with another namespace and other names, as the
	// apiserver takes it: every policy's CEL compiles with them. helm
	// template is told the cluster's version and APIs, as Argo CD does.
	e.namespace(t, "e2e-chart-names", nil)
	render := exec.Command("bash", "-c", `set -o pipefail; "$(scripts/helm.sh)" template vgpud charts/vgpud --namespace e2e-chart-names --kube-version "$(kubectl version -o json | jq -r .serverVersion.gitVersion)" `+
		`$(kubectl get --raw /apis/admissionregistration.k8s.io/v1 | grep -q '"kind":"MutatingAdmissionPolicy"' && echo --api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy) `+
		`--set image.repository=registry.example.com/gpu/vgpud `+
		`--set schedulerName=gpu-sched,fullnameOverride=gpu-names,resourceNames.gpu=example.com/vgpu,resourceNames.gpumem=example.com/vgpu-mem,monitoring.serviceMonitor=false `+
		`--set 'gpuAgentAccounts={nvidia-dcgm-exporter,dcgm}' | kubectl apply --dry-run=server -f -`)
	render.Dir = filepath.Join(e.scripts, "..")
	render.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	if out, err := render.CombinedOutput(); err != nil {
		t.Fatalf("the chart with other names, applied with --dry-run=server: %v\n%s", err, out)
	}
	t.Log("the chart rendered with other names passes the apiserver's validation (dry run)")
	nodes = e.nodes(t)
	ds, err := e.kube.AppsV1().DaemonSets(system).Get(ctx, e.name(""), metav1.GetOptions{})
	if err != nil || ds.Status.NumberReady != ds.Status.DesiredNumberScheduled || int(ds.Status.NumberReady) != len(nodes) {
		t.Fatalf("DaemonSet %+v on %d nodes, %v", ds.Status, len(nodes), err)
	}
	leader, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes %v; leader %s on %s", len(nodes), nodes, leader.Name, leader.Spec.NodeName)
	// No node was set up by hand: each node's init container set its
	// containerd up (the cluster starts them without vgpud's drop-in),
	// restarted it, and said so on the node; the restarts took turns on
	// the node-setup Lease, so their windows never overlap.
	window := regexp.MustCompile(`restarted the runtime \(PID \d+, now \d+\) from (\S+) to (\S+) with vgpud's drop-in`)
	type span struct {
		node     string
		from, to time.Time
	}
	var spans []span
	for _, n := range nodes {
		node, err := e.kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		label, msg := node.Labels[wellknown.LabelNodeSetup], node.Annotations[wellknown.AnnotationNodeSetup]
		m := window.FindStringSubmatch(msg)
		if label != wellknown.NodeSetupDone || m == nil {
			t.Errorf("node %s: %s=%q, %q; want done, its containerd restarted by the chart's node setup", n, wellknown.LabelNodeSetup, label, msg)
			continue
		}
		from, err1 := time.Parse(time.RFC3339Nano, m[1])
		to, err2 := time.Parse(time.RFC3339Nano, m[2])
		if err1 != nil || err2 != nil {
			t.Fatalf("node %s: restart window %q: %v %v", n, m[0], err1, err2)
		}
		spans = append(spans, span{n, from, to})
		t.Logf("node %s: containerd restarted by the node setup in %v", n, to.Sub(from).Round(time.Millisecond))
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from.Before(spans[j].from) })
	for i := 1; i < len(spans); i++ {
		if spans[i].from.Before(spans[i-1].to) {
			t.Errorf("containerd restarts overlap: %s from %v, while %s's ran to %v", spans[i].node, spans[i].from, spans[i-1].node, spans[i-1].to)
		}
	}
	if l, err := e.kube.CoordinationV1().Leases(system).Get(ctx, e.name("-node-setup"), metav1.GetOptions{}); err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "" || int(ptrInt32(l.Spec.LeaseTransitions)) < len(nodes) {
		t.Errorf("the node-setup Lease after the install: %+v, %v; want it released, after a hand-over per node", l, err)
	} else {
		t.Logf("node-setup Lease: %d hand-overs for %d restarts, one at a time, released", ptrInt32(l.Spec.LeaseTransitions), len(spans))
	}
	// Every node pulled vgpud from the cluster's registry, by the tag
	// and digest that push printed, as a real cluster pulls it.
	// (scripts/cluster.sh keeps it beside the kubeconfig.)
	pushed, err := os.ReadFile(filepath.Join(filepath.Dir(e.kubeconfig), "vgpud-image"))
	if err != nil {
		t.Fatal(err)
	}
	tagged, digest, _ := strings.Cut(strings.TrimSpace(string(pushed)), "@")
	repo := tagged[:strings.LastIndex(tagged, ":")]
	// The chart names the image by digest alone.
	image := repo + "@" + digest
	pods, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		st := p.Status.ContainerStatuses
		if p.Spec.Containers[0].Image != image || len(st) == 0 || st[0].ImageID != repo+"@"+digest {
			t.Fatalf("%s on %s runs %s (image ID %v); want %s pulled from the registry", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image, st, image)
		}
	}
	t.Logf("every node pulled %s", image)
	harness.Eventually(t, 30*time.Second, "Service endpoints are the leader", func() error {
		slices, err := e.kube.DiscoveryV1().EndpointSlices(system).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + e.name("")})
		if err != nil {
			return err
		}
		var ips []string
		for _, s := range slices.Items {
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
					ips = append(ips, ep.Addresses...)
				}
			}
		}
		if len(ips) != 1 || ips[0] != leader.Status.PodIP {
			return fmt.Errorf("endpoints %v, leader %s at %s", ips, leader.Name, leader.Status.PodIP)
		}
		return nil
	})
	mwc, err := e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, e.name(""), metav1.GetOptions{})
	if err != nil || len(mwc.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Fatalf("caBundle not set: %v", err)
	}
	// Every node advertises its own machine: 8 A100s x 10 slices on
	// the mock nodes, 4 L4s x 10 on vgpud-node-3.
	for _, n := range nodes {
		if err := e.advertising(n); err != nil {
			t.Fatal(err)
		}
		got, _, _ := e.allocatable(n)
		t.Logf("node %s: nvidia.com/gpu %d", n, got)
	}
	return nodes
}

func onePodEndToEnd(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	ns := "e2e-one"
	e.namespace(t, ns, nil)
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, gpuPod("one", map[string]string{"nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	took := e.waitRunning(t, ns, []string{"one"}, 90*time.Second)
	t.Logf("create -> Running: %v", took.Round(time.Millisecond))
	p, _ := e.kube.CoreV1().Pods(ns).Get(ctx, "one", metav1.GetOptions{})
	if p.Spec.SchedulerName != "vgpud-scheduler" {
		t.Errorf("schedulerName %q", p.Spec.SchedulerName)
	}
	a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
	if err != nil {
		t.Fatal(err)
	}
	// The runtime named the pod to vgpud's NRI hook: no phase
	// annotation is written on the way, and the node's inspect says
	// the hook created the container with its slice.
	if ph, ok := p.Annotations[wellknown.AnnotationPhase]; ok {
		t.Errorf("phase %q written where the runtime names pods", ph)
	}
	node := p.Spec.NodeName
	env := e.containerEnv(t, ns, "one")
	g := a.Containers[0].GPUs[0]
	if env["NVIDIA_VISIBLE_DEVICES"] != g.UUID || env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "3000m" || env["CUDA_DEVICE_SM_LIMIT"] != "30" || g.MemoryMiB != 3000 {
		t.Errorf("env %v, assignment %+v", env, a)
	}
	s := e.inspect(t, node)
	if s.Identity != wellknown.IdentityRuntime {
		t.Errorf("inspect on %s: identity %q", node, s.Identity)
	}
	found := false
	for _, al := range s.Allocations {
		if al.Namespace == ns && al.Pod == "one" {
			found = true
			if al.Phase != "created" {
				t.Errorf("inspect phase %q, want created", al.Phase)
			}
		}
	}
	if !found {
		t.Errorf("inspect on %s shows no allocation of %s/one: %+v", node, ns, s.Allocations)
	}
	// The cluster view, from inside a vgpud pod with its own
	// ServiceAccount, shows the same slice held by the pod.
	vp, err := e.vgpudPod(node)
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.kubectl("-n", system, "exec", vp.Name, "--", "vgpud", "inspect", "--cluster", "--json")
	if err != nil {
		t.Fatalf("inspect --cluster: %v %s", err, out)
	}
	var view inspectv1.ClusterView
	if err := json.Unmarshal([]byte(out), &view); err != nil {
		t.Fatalf("inspect --cluster --json: %v: %.300s", err, out)
	}
	held := false
	for _, n := range view.Nodes {
		for _, vg := range n.GPUs {
			if n.Name == node && vg.UUID == g.UUID && slices.Contains(vg.Pods, ns+"/one") && vg.MemoryUsedMiB >= 3000 {
				held = true
			}
		}
	}
	if !held || len(view.Nodes) == 0 {
		t.Errorf("inspect --cluster does not show %s/one on %s %s: %.600s", ns, node, g.UUID, out)
	}
	// The same view as a kubectl plugin, from this machine with the
	// admin kubeconfig: vgpud linked as kubectl-vgpud on PATH.
	table := e.kubectlVgpud(t)
	if err := harness.Contains(table, node, ns+"/one"); err != nil {
		t.Fatalf("kubectl vgpud: %v", err)
	}
	t.Logf("kubectl vgpud:\n%s", table)
	// As one who holds only the shipped vgpud-viewer ClusterRole,
	// through a second context of the kubeconfig, narrowed to the
	// namespace and the node, as YAML; then -o wide.
	kc := e.viewerKubeconfig(t)
	out = e.kubectlVgpud(t, "--kubeconfig", kc, "--context", "vgpud-viewer", "-n", ns, "--node", node, "-o", "yaml")
	var narrow inspectv1.ClusterView
	if err := yaml.Unmarshal([]byte(out), &narrow); err != nil {
		t.Fatalf("kubectl vgpud -o yaml: %v: %.300s", err, out)
	}
	if len(narrow.Nodes) != 1 || narrow.Nodes[0].Name != node || narrow.Node != node || narrow.Namespace != ns || len(narrow.Namespaces) != 0 ||
		!slices.ContainsFunc(narrow.Nodes[0].GPUs, func(vg inspectv1.GPUBooking) bool {
			return vg.UUID == g.UUID && slices.Equal(vg.Pods, []string{ns + "/one"})
		}) {
		t.Fatalf("kubectl vgpud --context vgpud-viewer -n %s --node %s -o yaml:\n%s", ns, node, out)
	}
	wide := e.kubectlVgpud(t, "--kubeconfig", kc, "--context", "vgpud-viewer", "-n", ns, "-o", "wide")
	if err := harness.Contains(wide, "UUID", g.UUID, "IDENTITY", ns+"/one"); err != nil {
		t.Fatalf("kubectl vgpud -n %s -o wide: %v", ns, err)
	}
	t.Logf("as vgpud-viewer, -n %s -o wide:\n%s", ns, wide)
}

func burstOnOneNode(t *testing.T, e env, nodes []string) {
	const n = 30
	plainNS, gpuNS := "e2e-burst-plain", "e2e-burst-gpu"
	e.namespace(t, plainNS, nil)
	e.namespace(t, gpuNS, nil)
	// All onto one node: where the runtime names pods, its binds
	// wait for no previous pod.
	target := nodes[0]
	e.settle(t, target)
	_, plainTook, plainLine := e.burst(t, plainNS, target, n, func(int) map[string]string { return nil })
	// Each set starts on a settled node: the GPU set beside 30 running
	// plain pods was slower by their kubelet and runtime work alone (30
	// plain pods beside 30 others: 1.04x to 1.22x the first 30).
	e.drain(t, plainNS, target)
	mem := func(i int) int64 { return 1000 + int64(i)*113 }
	gpus, gpuTook, gpuLine := e.burst(t, gpuNS, target, n, func(i int) map[string]string {
		return map[string]string{"nvidia.com/gpumem": strconv.FormatInt(mem(i), 10), "nvidia.com/gpucores": "10"}
	})
	t.Logf("30 plain busybox pods to Running: %v; 30 GPU pods: %v (ratio %.2f), all on %s, each set on a settled node", plainTook.Round(time.Millisecond), gpuTook.Round(time.Millisecond), gpuTook.Seconds()/plainTook.Seconds(), target)
	t.Log(plainLine)
	t.Log(gpuLine)
	for i, name := range gpus {
		env := e.containerEnv(t, gpuNS, name)
		if want := fmt.Sprintf("%dm", mem(i)); env["CUDA_DEVICE_MEMORY_LIMIT_0"] != want {
			t.Errorf("%s: CUDA_DEVICE_MEMORY_LIMIT_0=%s, want its own %s", name, env["CUDA_DEVICE_MEMORY_LIMIT_0"], want)
		}
	}
	t.Logf("GPU pods per node: %v", e.perNode(t, gpuNS))
	checkNoOversubscription(t, e)
}

func unfittablePod(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	ns := "e2e-unfit"
	e.namespace(t, ns, nil)
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, gpuPod("huge", map[string]string{"nvidia.com/gpumem": "60000"}, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 60*time.Second, "an event naming the reason", func() error {
		evs, err := e.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=huge"})
		if err != nil {
			return err
		}
		var msgs []string
		for _, ev := range evs.Items {
			msgs = append(msgs, ev.Reason+": "+ev.Message)
		}
		return harness.Contains(strings.Join(msgs, "\n"), "FailedScheduling", "60000 MiB", "largest free 40960 MiB")
	})
	p, _ := e.kube.CoreV1().Pods(ns).Get(ctx, "huge", metav1.GetOptions{})
	if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
		t.Errorf("phase %s on %q", p.Status.Phase, p.Spec.NodeName)
	}
}

func kubeletRestart(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	ns := "e2e-kubelet"
	e.namespace(t, ns, nil)
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, gpuPod("keeper", map[string]string{"nvidia.com/gpumem": "2500"}, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, ns, []string{"keeper"}, 90*time.Second)
	before := e.containerEnv(t, ns, "keeper")
	kp, _ := e.kube.CoreV1().Pods(ns).Get(ctx, "keeper", metav1.GetOptions{})
	node := kp.Spec.NodeName
	regs := e.inspect(t, node).Registration.Count
	out, err := exec.Command(e.scripts+"/cluster.sh", "restart-kubelet", nodeIndex(node)).CombinedOutput()
	if err != nil {
		t.Fatalf("restart kubelet: %v\n%s", err, out)
	}
	took := harness.Eventually(t, 120*time.Second, "re-registered and allocatable restored", func() error {
		s := e.inspect(t, node)
		if s.Registration.Count <= regs {
			return fmt.Errorf("registrations %d", s.Registration.Count)
		}
		return e.advertising(node)
	})
	s := e.inspect(t, node)
	t.Logf("kubelet of %s started -> plugin re-registered and allocatable whole again: %v (kubelet.sock -> Register %.1f ms, trigger %q)", node, took.Round(time.Millisecond), s.Registration.LatencyMs, s.Registration.Trigger)
	p, _ := e.kube.CoreV1().Pods(ns).Get(ctx, "keeper", metav1.GetOptions{})
	if p.Status.Phase != corev1.PodRunning {
		t.Errorf("keeper is %s after the kubelet restart", p.Status.Phase)
	}
	out2, err := e.kubectl("-n", ns, "exec", "keeper", "--", "sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES")
	if err != nil || strings.TrimSpace(out2) != before["NVIDIA_VISIBLE_DEVICES"] {
		t.Errorf("keeper's GPU after restart %q (%v), before %q", out2, err, before["NVIDIA_VISIBLE_DEVICES"])
	}
}

func leaderFailover(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	if len(nodes) < 2 {
		t.Skipf("failover needs another node's replica to hand over to; the cluster has %d node", len(nodes))
	}
	ns := "e2e-failover"
	e.namespace(t, ns, nil)
	old, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	replicas, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"})
	if err != nil {
		t.Fatal(err)
	}
	restartsBefore := map[string]int32{}
	for i := range replicas.Items {
		restartsBefore[replicas.Items[i].Name] = restarts(&replicas.Items[i])
	}
	killed := time.Now()
	// An ordinary delete: SIGTERM, which vgpud answers by releasing the
	// Lease; the pod stays behind the Service while it carries the
	// leader label (the Service routes by the label alone).
	if err := e.kube.CoreV1().Pods(system).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Keep creating GPU pods through the failover. A delete is a
	// planned handoff: the old leader serves admission until the new
	// one carries the label, so no create is refused. An admission
	// while the old leader still holds the label is its act, not the
	// new leader's: keep that pod (it must run too) and go on until
	// the new leader admits one.
	var refused []string
	var during []string
	var admitted *corev1.Pod
	took := harness.Eventually(t, 120*time.Second, "a GPU pod admitted by the new leader", func() error {
		p, err := e.kube.CoreV1().Pods(ns).Create(ctx, gpuPod(fmt.Sprintf("during-%d", len(during)), map[string]string{"nvidia.com/gpumem": "1500"}, nil), metav1.CreateOptions{})
		if err != nil {
			refused = append(refused, fmt.Sprintf("%.1fs: %v", time.Since(killed).Seconds(), err))
			return err
		}
		during = append(during, p.Name)
		if p.Spec.SchedulerName != "vgpud-scheduler" {
			t.Fatalf("pod created during failover has schedulerName %q", p.Spec.SchedulerName)
		}
		if l, err := e.leader(); err != nil || l.Name == old.Name {
			return fmt.Errorf("admitted while %s still led", old.Name)
		}
		admitted = p
		return nil
	})
	t.Logf("leader %s deleted -> first admission by the new leader: %v (%d creates refused, %d admitted by the old leader while it handed over)", old.Name, took.Round(time.Millisecond), len(refused), len(during)-1)
	if len(refused) > 0 {
		t.Errorf("a planned handoff refused %d creates: %v", len(refused), refused)
	}
	// Every pod admitted during the failover is placed by
	// vgpud-scheduler and runs; none fails. When the deleted leader was
	// the DaemonSet pod, this node's device plugin restarts too: it
	// says draining before it stops, so the leader binds nothing there
	// until the new one serves.
	harness.Eventually(t, 180*time.Second, "the pods created during the failover run", func() error {
		for _, name := range during {
			p, err := e.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase == corev1.PodFailed {
				t.Fatalf("%s, created during the failover, failed: %s: %s", name, p.Status.Reason, p.Status.Message)
			}
			if p.Annotations[wellknown.AnnotationAssignment] == "" || p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("%s not running on a vgpud assignment yet (phase %s, node %q)", name, p.Status.Phase, p.Spec.NodeName)
			}
		}
		return nil
	})
	t.Logf("the %d pods created during the failover run on their vgpud assignments, %v after the delete", len(during), time.Since(killed).Round(time.Millisecond))
	evs, _ := e.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + admitted.Name + ",reason=Scheduled"})
	for _, ev := range evs.Items {
		if ev.Source.Component != "vgpud-scheduler" && ev.ReportingController != "vgpud-scheduler" {
			t.Errorf("scheduled by %q/%q: %s", ev.Source.Component, ev.ReportingController, ev.Message)
		}
	}
	leader, err := e.leader()
	if err != nil || leader.Name == old.Name {
		t.Fatalf("new leader %v, %v", leader, err)
	}
	t.Logf("leader %s on %s deleted; new leader %s on %s, labelled %v after the delete", old.Name, old.Spec.NodeName, leader.Name, leader.Spec.NodeName, time.Since(killed).Round(time.Millisecond))
	// The old leader serves until a successor labels itself, so the
	// successor is a replica that already ran, on another node, whose
	// own device plugin went on serving throughout.
	if leader.Spec.NodeName == old.Spec.NodeName || leader.CreationTimestamp.After(killed) {
		t.Errorf("successor %s on %s (created %v), old leader on %s", leader.Name, leader.Spec.NodeName, leader.CreationTimestamp, old.Spec.NodeName)
	}
	// The successor records how it took the Lease: handed over when
	// the old leader's release landed, after expiry when it did not
	// (its release has the renew deadline, 3 s, on a loaded apiserver).
	harness.Eventually(t, 30*time.Second, "a LeaseHandedOver or LeaseTakenAfterExpiry Event by "+leader.Name, func() error {
		if err := e.leaseEvent("LeaseHandedOver", leader.Name, killed); err != nil {
			if e.leaseEvent("LeaseTakenAfterExpiry", leader.Name, killed) == nil {
				t.Logf("%s took the Lease after it expired: %s's release did not land", leader.Name, old.Name)
				return nil
			}
			return err
		}
		return nil
	})
	if n, ok := restartsBefore[leader.Name]; !ok || restarts(leader) != n {
		t.Errorf("successor %s: %d restarts, %d (known %v) before the delete", leader.Name, restarts(leader), n, ok)
	}
	if err := e.advertising(leader.Spec.NodeName); err != nil {
		t.Error(err)
	}
	// The DaemonSet pod comes back and the node is served again.
	e.daemonSetReady(t)

	// The node's own vgpud pod restarts while a GPU pod is created: the
	// plugin drains first, so the pod waits for the new plugin instead
	// of being bound to the old one and refused by kubelet.
	dsPods, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"})
	if err != nil || len(dsPods.Items) == 0 {
		t.Fatalf("DaemonSet pods: %v %v", dsPods, err)
	}
	restarted := time.Now()
	if err := e.kube.CoreV1().Pods(system).Delete(ctx, dsPods.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var created *corev1.Pod
	harness.Eventually(t, 60*time.Second, "a GPU pod admitted while the node's vgpud restarts", func() error {
		created, err = e.kube.CoreV1().Pods(ns).Create(ctx, gpuPod("during-restart", map[string]string{"nvidia.com/gpumem": "1500"}, nil), metav1.CreateOptions{})
		return err
	})
	harness.Eventually(t, 180*time.Second, "the pod created during the node role's restart runs", func() error {
		p, err := e.kube.CoreV1().Pods(ns).Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("the pod created during the node role's restart failed: %s: %s", p.Status.Reason, p.Status.Message)
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s, node %q", p.Status.Phase, p.Spec.NodeName)
		}
		return nil
	})
	t.Logf("node's vgpud pod deleted -> a GPU pod created then runs: %v", time.Since(restarted).Round(time.Millisecond))
	e.daemonSetReady(t)
	// Leave the cluster as found: the restart may have moved the
	// leadership, and the next scenario needs the webhook reachable.
	n := 0
	harness.Eventually(t, 60*time.Second, "admission through the current leader", func() error {
		n++
		_, err := e.kube.CoreV1().Pods(ns).Create(ctx, gpuPod(fmt.Sprintf("after-%d", n), map[string]string{"nvidia.com/gpumem": "100"}, nil), metav1.CreateOptions{})
		return err
	})
}

func denials(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	ns := "e2e-deny"
	e.namespace(t, ns, nil)
	apply := func(yaml string) error {
		cmd := exec.Command("kubectl", "-n", ns, "apply", "-f", "-")
		cmd.Env = append(cmd.Environ(), "KUBECONFIG="+e.kubeconfig)
		cmd.Stdin = strings.NewReader(yaml)
		out, err := cmd.CombinedOutput()
		if err == nil {
			return fmt.Errorf("admitted: %s", out)
		}
		return fmt.Errorf("%s", out)
	}
	pod := func(name, extra, limits string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec:\n%s  containers:\n  - name: c\n    image: vgpud.local/busybox:1\n    resources: {limits: {%s}}\n%s",
			name, nodeNameLine(extra), limits, privLine(extra))
	}
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"privileged", pod("priv", "privileged", `nvidia.com/gpu: "1"`), []string{"pods.vgpud.io", "privileged"}},
		{"nodeName", pod("pinned", "nodeName", `nvidia.com/gpumem: "1000"`), []string{"pods.vgpud.io", "nodeName"}},
	} {
		err := apply(tc.yaml)
		if err := harness.Contains(err.Error(), tc.want...); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if _, err := e.kube.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.nvidia.com/gpumem": resource.MustParse("5000")}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "quota denial at kubectl apply", func() error {
		err := apply(pod("over", "", `nvidia.com/gpumem: "6000"`))
		return harness.Contains(err.Error(), "pods.vgpud.io", "namespace "+ns+": gpumem quota 5000 MiB")
	})
}

func optOutNamespace(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	ns := "e2e-optout"
	e.namespace(t, ns, map[string]string{"vgpud.io/webhook": "ignore"})
	// Admission refuses a vGPU pod another scheduler would place
	// (vgpud-scheduled-only), so an opted-out pod names
	// vgpud-scheduler itself; the webhook still leaves it as written.
	refused := gpuPod("refused", map[string]string{"nvidia.com/gpumem": "1000"}, nil)
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, refused, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "vgpud-scheduled-only") {
		t.Errorf("an opted-out vGPU pod for the default scheduler: %v", err)
	}
	untouched := gpuPod("untouched", map[string]string{"nvidia.com/gpumem": "1000"}, nil)
	untouched.Spec.SchedulerName = "vgpud-scheduler"
	p, err := e.kube.CoreV1().Pods(ns).Create(ctx, untouched, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.Containers[0].Resources.Limits) != 1 || len(p.Annotations) != 0 {
		t.Errorf("pod was changed: scheduler %q, limits %v, annotations %v", p.Spec.SchedulerName, p.Spec.Containers[0].Resources.Limits, p.Annotations)
	}
}

func stateSurvivesRestart(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	ns := "e2e-survive"
	e.namespace(t, ns, nil)
	// Two whole GPUs taken; binpack would pick them first if the
	// rebuilt books forgot them.
	var names []string
	for i := range 2 {
		p := gpuPod(fmt.Sprintf("whole-%d", i), map[string]string{"nvidia.com/gpu": "1"}, nil)
		if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
	}
	e.waitRunning(t, ns, names, 90*time.Second)
	before := map[string]inspectv1.NodeSnapshot{} // by node
	full := map[string]bool{}
	for _, name := range names {
		p, _ := e.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if _, ok := before[p.Spec.NodeName]; ok {
			continue
		}
		s := e.inspect(t, p.Spec.NodeName)
		before[p.Spec.NodeName] = s
		for _, g := range s.GPUs {
			if g.CoresUsed >= g.Cores {
				full[g.UUID] = true
			}
		}
	}
	if len(full) < 2 {
		t.Fatalf("want two full GPUs, inspect shows %+v", before)
	}
	pods, _ := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=vgpud"})
	grace := int64(0)
	for _, p := range pods.Items {
		// One an earlier scenario deleted may be gone by now.
		if err := e.kube.CoreV1().Pods(system).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	restarted := time.Now()
	oldNames := map[string]bool{}
	for _, p := range pods.Items {
		oldNames[p.Name] = true
	}
	// Wait for the replacements: a pod created while the node's plugin
	// is down is refused by kubelet itself (UnexpectedAdmissionError),
	// as with any device plugin.
	harness.Eventually(t, 180*time.Second, "new vgpud pods ready and leading", func() error {
		l, err := e.leader()
		if err != nil {
			return err
		}
		if oldNames[l.Name] {
			return fmt.Errorf("old pod %s still labelled", l.Name)
		}
		ds, err := e.kube.AppsV1().DaemonSets(system).Get(ctx, "vgpud", metav1.GetOptions{})
		if err != nil || ds.Status.NumberReady != ds.Status.DesiredNumberScheduled || ds.Status.UpdatedNumberScheduled != ds.Status.DesiredNumberScheduled {
			return fmt.Errorf("DaemonSet %+v %v", ds.Status, err)
		}
		live, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=vgpud"})
		if err != nil {
			return err
		}
		for _, p := range live.Items {
			if oldNames[p.Name] {
				return fmt.Errorf("old pod %s still there", p.Name)
			}
		}
		// kubelet reports no nvidia.com/gpu while the plugin is away;
		// a pod created before it is back waits for kube-scheduler's
		// next retry.
		for _, n := range nodes {
			if err := e.advertising(n); err != nil {
				return err
			}
		}
		return nil
	})
	back := time.Since(restarted)
	// The Service may route to the new leader a moment after its label.
	harness.Eventually(t, 60*time.Second, "the new pod admitted", func() error {
		_, err := e.kube.CoreV1().Pods(ns).Create(ctx, gpuPod("after", map[string]string{"nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"}, map[string]string{wellknown.AnnotationGPUPolicy: "binpack"}), metav1.CreateOptions{})
		return err
	})
	e.waitRunning(t, ns, []string{"after"}, 120*time.Second)
	t.Logf("every vgpud pod deleted -> replacements ready and leading: %v; -> a new GPU pod Running: %v", back.Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	p, _ := e.kube.CoreV1().Pods(ns).Get(ctx, "after", metav1.GetOptions{})
	a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
	if err != nil {
		t.Fatal(err)
	}
	if g := a.Containers[0].GPUs[0].UUID; full[g] {
		t.Errorf("new pod landed on full GPU %s", g)
	}
	for node, b := range before {
		after := e.inspect(t, node)
		for i, g := range b.GPUs {
			if full[g.UUID] && (after.GPUs[i].CoresUsed != g.CoresUsed || after.GPUs[i].MemoryUsedMiB != g.MemoryUsedMiB) {
				t.Errorf("%s GPU %d: before %+v, after %+v", node, i, g, after.GPUs[i])
			}
		}
	}
}

func ptrInt32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
