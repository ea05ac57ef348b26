//go:build e2e

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// kueueJobs is #53 item 2: Kueue (scripts/kueue.sh, built from the Go
// module proxy) in front of vgpud. A ClusterQueue holds quotas on
// nvidia.com/gpu, gpumem and gpucores. A Job whose template names only
// gpumem is counted a GPU per pod (vgpud's admission completes the
// template); a Job of two GPUs with 2000 MiB each is counted 4000 MiB
// (Kueue's multiplyBy), so it waits in the queue while the first runs
// and is admitted when it ends; both are placed by vgpud, and Kueue's
// books equal vgpud's assignments. Then waitForPodsReady: a Job of two
// whole GPUs on a node with one free is evicted whole (its running pod
// too) and starts whole once the GPU it lacked is freed.
func kueueJobs(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	const ns, queue = "e2e-kueue", "e2e-gpus"
	e.idleGPUs(t)
	// Before the install: one that applied and then failed leaves
	// Kueue's webhooks, which refuse every Job while it is down.
	t.Cleanup(func() {
		start := time.Now()
		if err := e.kueueRun("uninstall"); err != nil {
			t.Errorf("uninstall Kueue: %v", err)
		}
		t.Logf("Kueue removed in %v", time.Since(start).Round(time.Millisecond))
	})
	start := time.Now()
	e.kueueScript(t, "install")
	t.Logf("Kueue installed in %v", time.Since(start).Round(time.Millisecond))
	// While Kueue runs, to release the finalizers it put on the
	// namespace's objects.
	t.Cleanup(func() {
		if err := e.namespaceGone(ns); err != nil {
			t.Error(err)
		}
	})
	e.namespace(t, ns, nil)
	e.apply(t, fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: %[1]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %[1]s}
spec:
  namespaceSelector: {}
  resourceGroups:
    - coveredResources: [nvidia.com/gpu, nvidia.com/gpumem, nvidia.com/gpucores]
      flavors:
        - name: %[1]s
          resources:
            - {name: nvidia.com/gpu, nominalQuota: 8}
            - {name: nvidia.com/gpumem, nominalQuota: "9000"}
            - {name: nvidia.com/gpucores, nominalQuota: 800}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: %[1]s, namespace: %[2]s}
spec: {clusterQueue: %[1]s}
`, queue, ns))

	// Memory only: the template is completed with a GPU per pod, which
	// Kueue counts; 2 pods of 3000 MiB. It names no cores: each pod is
	// given a slot's share of its GPU's cores at placement, which Kueue
	// cannot count, and the Job's author is told so at create.
	memOnly := gpuJob("mem-only", queue, 2, map[string]string{"nvidia.com/gpumem": "3000"})
	warned := &warnings{}
	created, err := e.warningClient(t, warned).BatchV1().Jobs(ns).Create(ctx, memOnly, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := created.Spec.Template.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"]; got.Value() != 1 {
		t.Fatalf("the Job's template asks %s nvidia.com/gpu after admission; want 1 (vgpud's admission completes it)", got.String())
	}
	if !warned.has("names no nvidia.com/gpucores") {
		t.Fatalf("creating mem-only warned %q; want the cores Kueue cannot count", warned.all())
	}
	t.Logf("mem-only's create warned: %s", warned.all())
	wl := e.admittedWorkload(t, ns, "mem-only")
	running := e.jobRunning(t, ns, "mem-only", 2)
	e.podsReady(t, ns, "mem-only")
	kueue, vgpud := e.books(t, wl, running)
	if kueue != (books{gpus: 2, mem: 6000}) || vgpud.gpus != 2 || vgpud.mem != 6000 || vgpud.cores <= 0 {
		t.Errorf("mem-only: Kueue charged %+v, vgpud assigned %+v; want 2 GPUs and 6000 MiB both, and cores from vgpud alone", kueue, vgpud)
	}

	// Two GPUs of 2000 MiB and 25 cores each: 4000 MiB and 50 cores, by
	// vgpud's rule and by Kueue's multiplyBy. With mem-only's 6000 MiB
	// that passes the queue's 9000: it waits, its Job suspended.
	two := gpuJob("two-gpus", queue, 1, map[string]string{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "25"})
	if _, err := e.kube.BatchV1().Jobs(ns).Create(ctx, two, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 60*time.Second, "two-gpus queued for lack of gpumem", func() error {
		w, err := e.workloadOf(ns, "two-gpus")
		if err != nil {
			return err
		}
		c := w.condition("QuotaReserved")
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "nvidia.com/gpumem") {
			return fmt.Errorf("QuotaReserved %+v", c)
		}
		t.Logf("two-gpus waits: %s", c.Message)
		return nil
	})
	if pods := e.jobPods(t, ns, "two-gpus"); len(pods) > 0 {
		t.Fatalf("two-gpus has %d pods while queued", len(pods))
	}
	if j, err := e.kube.BatchV1().Jobs(ns).Get(ctx, "two-gpus", metav1.GetOptions{}); err != nil || j.Spec.Suspend == nil || !*j.Spec.Suspend {
		t.Fatalf("two-gpus not suspended while queued: %v", err)
	}
	e.deleteJob(t, ns, "mem-only")
	wl = e.admittedWorkload(t, ns, "two-gpus")
	running = e.jobRunning(t, ns, "two-gpus", 1)
	e.podsReady(t, ns, "two-gpus")
	if kueue, vgpud := e.books(t, wl, running); kueue != vgpud || vgpud != (books{gpus: 2, mem: 4000, cores: 50}) {
		t.Errorf("two-gpus: Kueue charged %+v, vgpud assigned %+v; want 2 GPUs, 4000 MiB and 50 cores both", kueue, vgpud)
	}
	e.deleteJob(t, ns, "two-gpus")

	// All or nothing: a node's GPUs all held whole but one by a pod
	// outside Kueue; a Job of two whole GPUs pinned there gets one pod
	// placed and one refused by vgpud, and after waitForPodsReady's
	// timeout Kueue evicts the Job whole.
	node := nodes[0]
	got, err := e.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := protocol.DecodeInventory(got.Annotations[wellknown.AnnotationGPUs])
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) < 2 {
		t.Fatalf("node %s has %d GPUs; the scenario needs 2", node, len(inv.GPUs))
	}
	squat := gpuPod("squatter", map[string]string{"nvidia.com/gpu": fmt.Sprint(len(inv.GPUs) - 1), "nvidia.com/gpucores": "100"}, nil)
	squat.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, squat, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, ns, []string{"squatter"}, 90*time.Second)
	gang := gpuJob("gang", queue, 2, map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"})
	gang.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	if _, err := e.kube.BatchV1().Jobs(ns).Create(ctx, gang, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := e.jobRunning(t, ns, "gang", 1)[0]
	evictedAt := time.Now()
	// The other pod waits, unschedulable: no GPU on the node is free.
	// Within a minute: Kueue admits it again after each eviction.
	harness.Eventually(t, 60*time.Second, "the gang's second pod unschedulable", func() error {
		for _, p := range e.jobPods(t, ns, "gang") {
			if p.Spec.NodeName != "" {
				continue
			}
			if why, ok := harness.Unschedulable(&p); ok {
				t.Logf("%s waits: %s", p.Name, why)
				return nil
			}
		}
		return fmt.Errorf("no pod of gang is unschedulable")
	})
	harness.Eventually(t, 90*time.Second, "gang evicted by waitForPodsReady", func() error {
		w, err := e.workloadOf(ns, "gang")
		if err != nil {
			return err
		}
		if w.Status.SchedulingStats != nil {
			for _, ev := range w.Status.SchedulingStats.Evictions {
				if ev.Reason == "PodsReadyTimeout" && ev.Count >= 1 {
					return nil
				}
			}
		}
		return fmt.Errorf("not evicted for PodsReadyTimeout yet; conditions %+v", w.Status.Conditions)
	})
	t.Logf("gang evicted %v after its first pod ran", time.Since(evictedAt).Round(time.Millisecond))
	harness.Eventually(t, 30*time.Second, "the gang's running pod ended with the eviction", func() error {
		p, err := e.kube.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		case p.UID == first.UID && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning:
			return fmt.Errorf("%s still running", first.Name)
		}
		return nil
	})
	grace := int64(0)
	if err := e.kube.CoreV1().Pods(ns).Delete(ctx, "squatter", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	running = e.jobRunning(t, ns, "gang", 2)
	e.podsReady(t, ns, "gang")
	t.Logf("gang ran whole %v after the GPU it lacked was freed", time.Since(freed).Round(time.Millisecond))
	for _, p := range running {
		if p.Spec.NodeName != node {
			t.Errorf("gang pod %s on %s; pinned to %s", p.Name, p.Spec.NodeName, node)
		}
	}
	e.deleteJob(t, ns, "gang")

	// A scheduler of its own: refused at create, pointed to the page
	// that says what to do instead.
	volcano := gpuPod("volcano", map[string]string{"nvidia.com/gpumem": "1000"}, nil)
	volcano.Spec.SchedulerName = "volcano"
	_, err = e.kube.CoreV1().Pods(ns).Create(ctx, volcano, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "vgpud-scheduled-only") || !strings.Contains(err.Error(), "docs/batch.md") {
		t.Fatalf("a vGPU pod for Volcano: %v; want vgpud-scheduled-only's refusal pointing to docs/batch.md", err)
	}
	t.Logf("a vGPU pod for Volcano: %v", err)
}

// gpuJob is a Job of n busybox pods, each with limits, in Kueue's queue.
func gpuJob(name, queue string, n int32, limits map[string]string) *batchv1.Job {
	p := gpuPod(name, limits, nil)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kueue.x-k8s.io/queue-name": queue}},
		Spec: batchv1.JobSpec{
			Parallelism: &n, Completions: &n,
			Template: corev1.PodTemplateSpec{Spec: p.Spec},
		},
	}
}

// kueueWorkload is what the scenario reads of a Kueue Workload.
type kueueWorkload struct {
	Metadata struct {
		Name            string `json:"name"`
		OwnerReferences []struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Status struct {
		Conditions []metav1.Condition `json:"conditions"`
		Admission  *struct {
			PodSetAssignments []struct {
				ResourceUsage map[string]resource.Quantity `json:"resourceUsage"`
				Count         int32                        `json:"count"`
			} `json:"podSetAssignments"`
		} `json:"admission"`
		SchedulingStats *struct {
			Evictions []struct {
				Reason string `json:"reason"`
				Count  int32  `json:"count"`
			} `json:"evictions"`
		} `json:"schedulingStats"`
	} `json:"status"`
}

func (w *kueueWorkload) condition(kind string) *metav1.Condition {
	for i := range w.Status.Conditions {
		if w.Status.Conditions[i].Type == kind {
			return &w.Status.Conditions[i]
		}
	}
	return nil
}

// workloadOf reads the Workload Kueue made for Job job.
func (e env) workloadOf(ns, job string) (*kueueWorkload, error) {
	out, err := e.kubectl("-n", ns, "get", "workloads.kueue.x-k8s.io", "-o", "json")
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []kueueWorkload `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, err
	}
	for i := range list.Items {
		for _, o := range list.Items[i].Metadata.OwnerReferences {
			if o.Kind == "Job" && o.Name == job {
				return &list.Items[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no Workload for Job %s/%s yet", ns, job)
}

// admittedWorkload waits for Kueue to admit job's Workload.
func (e env) admittedWorkload(t *testing.T, ns, job string) *kueueWorkload {
	t.Helper()
	var w *kueueWorkload
	harness.Eventually(t, 60*time.Second, job+" admitted by Kueue", func() error {
		var err error
		if w, err = e.workloadOf(ns, job); err != nil {
			return err
		}
		if c := w.condition("Admitted"); c == nil || c.Status != metav1.ConditionTrue || w.Status.Admission == nil {
			return fmt.Errorf("Admitted %+v", c)
		}
		return nil
	})
	return w
}

// podsReady waits for Kueue to see every pod of job ready.
func (e env) podsReady(t *testing.T, ns, job string) {
	t.Helper()
	harness.Eventually(t, 60*time.Second, job+"'s PodsReady", func() error {
		w, err := e.workloadOf(ns, job)
		if err != nil {
			return err
		}
		if c := w.condition("PodsReady"); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("PodsReady %+v", c)
		}
		return nil
	})
}

// jobPods lists job's pods that are not being deleted.
func (e env) jobPods(t *testing.T, ns, job string) []corev1.Pod {
	t.Helper()
	pods, err := e.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// jobRunning waits until n of job's pods run, each placed by vgpud's
// scheduler with an assignment, and returns them.
func (e env) jobRunning(t *testing.T, ns, job string, n int) []corev1.Pod {
	t.Helper()
	var running []corev1.Pod
	harness.Eventually(t, 90*time.Second, fmt.Sprintf("%d pods of %s running", n, job), func() error {
		running = nil
		for _, p := range e.jobPods(t, ns, job) {
			if p.Status.Phase == corev1.PodRunning {
				running = append(running, p)
			}
		}
		if len(running) < n {
			return fmt.Errorf("%d running", len(running))
		}
		return nil
	})
	for _, p := range running {
		if p.Spec.SchedulerName != "vgpud-scheduler" || p.Annotations[wellknown.AnnotationAssignment] == "" {
			t.Fatalf("%s: scheduler %q, assignment %q: not placed by vgpud", p.Name, p.Spec.SchedulerName, p.Annotations[wellknown.AnnotationAssignment])
		}
	}
	return running
}

// books is GPUs, memory (MiB) and cores, as Kueue charges them or vgpud
// assigns them.
type books struct{ gpus, mem, cores int64 }

// books reads what Kueue charged the Workload and what vgpud assigned
// its running pods.
func (e env) books(t *testing.T, w *kueueWorkload, pods []corev1.Pod) (kueue, vgpud books) {
	t.Helper()
	for _, p := range pods {
		a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		for _, c := range a.Containers {
			for _, g := range c.GPUs {
				vgpud.gpus++
				vgpud.mem += g.MemoryMiB
				vgpud.cores += int64(g.Cores)
			}
		}
	}
	usage := w.Status.Admission.PodSetAssignments[0].ResourceUsage
	value := func(n string) int64 { q := usage[n]; return q.Value() }
	kueue = books{gpus: value("nvidia.com/gpu"), mem: value("nvidia.com/gpumem"), cores: value("nvidia.com/gpucores")}
	t.Logf("%s: Kueue charged %d GPUs, %d MiB, %d cores; vgpud assigned %d GPUs, %d MiB, %d cores",
		w.Metadata.Name, kueue.gpus, kueue.mem, kueue.cores, vgpud.gpus, vgpud.mem, vgpud.cores)
	return kueue, vgpud
}

// warnings collects the apiserver's warnings to one client.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warnings) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.msgs, " | ")
}

func (w *warnings) has(s string) bool { return strings.Contains(w.all(), s) }

// warningClient is a client whose warnings go to w.
func (e env) warningClient(t *testing.T, w *warnings) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.WarningHandler = w
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// deleteJob deletes job with its pods and waits until they are gone.
func (e env) deleteJob(t *testing.T, ns, job string) {
	t.Helper()
	bg := metav1.DeletePropagationBackground
	grace := int64(0)
	if err := e.kube.BatchV1().Jobs(ns).Delete(context.Background(), job, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	_ = e.kube.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{LabelSelector: "job-name=" + job})
	harness.Eventually(t, 60*time.Second, job+"'s pods gone", func() error {
		pods, err := e.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + job})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d left", len(pods.Items))
		}
		return nil
	})
}

// apply applies manifest with kubectl.
func (e env) apply(t *testing.T, manifest string) {
	t.Helper()
	cmd := exec.Command("kubectl", "apply", "-f", "-")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
}

// kueueScript runs scripts/kueue.sh with args, failing the test if it fails.
func (e env) kueueScript(t *testing.T, args ...string) {
	t.Helper()
	if err := e.kueueRun(args...); err != nil {
		t.Fatal(err)
	}
}

func (e env) kueueRun(args ...string) error {
	cmd := exec.Command(filepath.Join(e.scripts, "kueue.sh"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kueue.sh %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
