//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vgpud/vgpud/manifests"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

const (
	tenantNS = "e2e-tenant"
	tenant   = "system:serviceaccount:" + tenantNS + ":tenant"
)

// newTenant makes namespace ns with a ServiceAccount "tenant" bound to the
// built-in edit ClusterRole there, and returns kubectl acting as it.
func newTenant(t *testing.T, e env, ns string) func(stdin string, args ...string) (string, error) {
	t.Helper()
	ctx := context.Background()
	// Pod Security baseline, as the manifest's tenant example has it:
	// without it edit reaches around every fence (docs/security-tenants.md).
	labels, err := manifests.TenantLabels()
	if err != nil {
		t.Fatal(err)
	}
	e.namespace(t, ns, labels)
	if _, err := e.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "tenant", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	as := "system:serviceaccount:" + ns + ":tenant"
	asTenant := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command("kubectl", append([]string{"--as=" + as, "-n", ns}, args...)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	harness.Eventually(t, 30*time.Second, "the tenant may create pods (edit role)", func() error {
		out, err := asTenant("", "auth", "can-i", "create", "pods")
		return harness.Contains(out+fmt.Sprint(err), "yes")
	})
	return asTenant
}

// tenantAttacks acts as a tenant would: a ServiceAccount bound to the
// built-in edit ClusterRole in its own namespace, using kubectl --as and a
// client on the pod network. Every attack in docs/security-tenants.md's tenant
// model is tried, and each must be refused or harmless.
func tenantAttacks(t *testing.T, e env) {
	ctx := context.Background()
	asTenant := newTenant(t, e, tenantNS)
	// A victim: a running GPU pod whose booking must survive everything below.
	// On an A100 node: the forged assignment below claims a whole 40960 MiB.
	victim := gpuPod("victim", map[string]string{"nvidia.com/gpumem": "3000"}, map[string]string{wellknown.AnnotationUseGPUType: "A100"})
	if _, err := e.kube.CoreV1().Pods(tenantNS).Create(ctx, victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, tenantNS, []string{"victim"}, 60*time.Second)
	before, err := e.kube.CoreV1().Pods(tenantNS).Get(ctx, "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node := before.Spec.NodeName // the node every attack below aims at
	booked := e.inspect(t, node)

	forged := `{"version":1,"node":"` + node + `","containers":[{"name":"main","gpus":[{"uuid":"` + booked.GPUs[0].UUID + `","memoryMiB":40960,"cores":100}]}]}`
	podYAML := func(name, extra string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  labels: {vgpud.io/webhook: ignore}
  annotations:
    vgpud.io/phase: bound
    vgpud.io/assignment: '%s'
spec:
%s  containers:
  - name: main
    image: vgpud.local/busybox:1
    command: [sleep, "3600"]
    resources: {limits: {nvidia.com/gpu: "1"}}
`, name, forged, extra)
	}

	t.Run("steal a GPU with a forged assignment", func(t *testing.T) {
		// vgpud-scheduler and no nodeName, so that only the annotation
		// policy has cause to refuse it (vgpud-scheduled-only refuses
		// pinned pods; which refusal the apiserver reports first varies).
		out, err := asTenant(podYAML("steal", "  schedulerName: vgpud-scheduler\n"), "apply", "-f", "-")
		if err == nil || harness.Contains(out, "ValidatingAdmissionPolicy 'vgpud-annotations'", "vgpud.io/assignment") != nil {
			t.Fatalf("forged pod: %v %s", err, out)
		}
		t.Logf("refused at create: %s", strings.TrimSpace(out))
	})

	t.Run("block a node with a pending forged bound pod", func(t *testing.T) {
		out, err := asTenant(podYAML("squat", "  schedulerName: vgpud-scheduler\n"), "apply", "-f", "-")
		if err == nil || harness.Contains(out, "ValidatingAdmissionPolicy 'vgpud-annotations'") != nil {
			t.Fatalf("squatting pod: %v %s", err, out)
		}
		// Nor may the tenant annotate a pod it already has.
		out, err = asTenant("", "annotate", "pod", "victim", "--overwrite", "vgpud.io/phase=bound")
		if err == nil || harness.Contains(out, "ValidatingAdmissionPolicy 'vgpud-annotations'") != nil {
			t.Fatalf("annotate: %v %s", err, out)
		}
		out, err = asTenant("", "annotate", "pod", "victim", "vgpud.io/assignment-")
		if err == nil || harness.Contains(out, "ValidatingAdmissionPolicy 'vgpud-annotations'") != nil {
			t.Fatalf("remove the victim's assignment: %v %s", err, out)
		}
	})

	t.Run("bind a pod with a forged assignment through a Binding", func(t *testing.T) {
		// The tenant has no right to bind at all.
		binding := fmt.Sprintf(`apiVersion: v1
kind: Binding
metadata:
  name: victim
  annotations: {vgpud.io/phase: bound, vgpud.io/assignment: '%s'}
target: {kind: Node, name: %s}
`, forged, node)
		out, err := asTenant(binding, "create", "-f", "-")
		if err == nil || harness.Contains(out, "forbidden") != nil {
			t.Fatalf("tenant Binding: %v %s", err, out)
		}
		// Whoever may bind (kube-scheduler's identity here) still cannot
		// carry vgpud's annotations onto a pod that way.
		pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unbound", Namespace: tenantNS},
			Spec: corev1.PodSpec{SchedulerName: "nobody", Containers: []corev1.Container{{Name: "main", Image: "vgpud.local/busybox:1", Command: []string{"sleep", "3600"}}}}}
		if _, err := e.kube.CoreV1().Pods(tenantNS).Create(ctx, pending, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = e.kube.CoreV1().Pods(tenantNS).Delete(context.Background(), "unbound", metav1.DeleteOptions{})
		}()
		err = e.impersonate(t, "system:kube-scheduler", nil).CoreV1().Pods(tenantNS).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: "unbound", Annotations: map[string]string{wellknown.AnnotationAssignment: forged, wellknown.AnnotationPhase: string(protocol.PhaseBound)}},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		}, metav1.CreateOptions{})
		if err == nil || harness.Contains(err.Error(), "ValidatingAdmissionPolicy 'vgpud-annotations'", "vgpud.io/assignment") != nil {
			t.Fatalf("scheduler Binding with vgpud's annotations: %v", err)
		}
		t.Logf("refused: %v", err)
	})

	t.Run("a replica writes only its own node", func(t *testing.T) {
		// vgpud's identity with a token bound to another node, as a
		// compromised replica elsewhere would hold.
		patch := []byte(`{"metadata":{"annotations":{"vgpud.io/gpus":"{\"version\":1,\"gpus\":[]}"}}}`)
		for boundTo, want := range map[string]string{"another-node": "bound to another-node, not " + node, "": "bound to no node"} {
			var extra map[string][]string
			if boundTo != "" {
				extra = map[string][]string{"authentication.kubernetes.io/node-name": {boundTo}}
			}
			kube := e.impersonate(t, "system:serviceaccount:vgpud-system:vgpud", extra)
			_, err := kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("vgpud's identity, token bound to %q, patched %s's inventory: %v", boundTo, node, err)
			}
			t.Logf("token bound to %q: %v", boundTo, err)
		}
	})

	t.Run("steal a GPU by nodeName without the webhook", func(t *testing.T) {
		// No forged annotations: admission refuses a vGPU pod vgpud's
		// scheduler does not place (runtime_test.go shows the runtime
		// hook refusing it too, with this policy out of the way).
		yaml := strings.Replace(podYAML("pinned", "  nodeName: "+node+"\n"), "  annotations:\n    vgpud.io/phase: bound\n    vgpud.io/assignment: '"+forged+"'\n", "", 1)
		out, err := asTenant(yaml, "apply", "-f", "-")
		if err == nil || harness.Contains(out, "ValidatingAdmissionPolicy 'vgpud-scheduled-only'", "only vgpud-scheduler places vGPU pods") != nil {
			t.Fatalf("plain pinned pod: %v %s", err, out)
		}
		t.Logf("refused at create: %s", strings.TrimSpace(out))
	})

	t.Run("rogue bind from the pod network", func(t *testing.T) {
		leader, err := e.leader()
		if err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`{"PodName":"victim","PodNamespace":%q,"PodUID":%q,"Node":%q}`, tenantNS, before.UID, node)
		for _, verb := range []string{"filter", "prioritize", "bind"} {
			url := fmt.Sprintf("https://%s:9444/%s", leader.Status.PodIP, verb)
			cmd := exec.Command("nsenter", "--net=/var/run/netns/vgpud-e2e", "curl", "-sk", "--max-time", "5", "-d", body, url)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("/%s answered a caller without kube-scheduler's certificate: %s", verb, out)
			}
			t.Logf("/%s without a client certificate: %v", verb, err)
		}
		after, err := e.kube.CoreV1().Pods(tenantNS).Get(ctx, "victim", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.Annotations[wellknown.AnnotationAssignment] != before.Annotations[wellknown.AnnotationAssignment] || after.Status.Phase != corev1.PodRunning {
			t.Fatalf("victim changed: %v %s", after.Annotations, after.Status.Phase)
		}
		// Nothing above booked or unbooked anything: every GPU's usage is
		// what it was with the victim alone.
		now := e.inspect(t, node)
		for i, g := range booked.GPUs {
			if now.GPUs[i].MemoryUsedMiB != g.MemoryUsedMiB || now.GPUs[i].SlicesUsed != g.SlicesUsed {
				t.Errorf("GPU %d: %d MiB in %d slices before the attacks, %d in %d after", i, g.MemoryUsedMiB, g.SlicesUsed, now.GPUs[i].MemoryUsedMiB, now.GPUs[i].SlicesUsed)
			}
		}
	})

	t.Run("the attacked node still schedules", func(t *testing.T) {
		// Every attack above aimed at node: a GPU pod sent there now is
		// bound and runs, so none of them blocked it.
		p := gpuPod("after", map[string]string{"nvidia.com/gpumem": "1000"}, nil)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		if _, err := e.kube.CoreV1().Pods(tenantNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitRunning(t, tenantNS, []string{"after"}, 60*time.Second)
		grace := int64(1)
		if err := e.kube.CoreV1().Pods(tenantNS).Delete(ctx, "after", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, 60*time.Second, "pod after gone", func() error {
			if _, err := e.kube.CoreV1().Pods(tenantNS).Get(ctx, "after", metav1.GetOptions{}); err == nil {
				return fmt.Errorf("still there")
			}
			return nil
		})
	})

	t.Run("skip quota", func(t *testing.T) {
		if _, err := e.kube.CoreV1().ResourceQuotas(tenantNS).Create(ctx, &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
			Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.nvidia.com/gpumem": resource.MustParse("9000")}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The opt-out label skips admission; bind still counts. Half of a
		// 40960 MiB GPU is 20480 MiB, far over what is left of 9000.
		yaml := `apiVersion: v1
kind: Pod
metadata:
  name: skipper
  labels: {vgpud.io/webhook: ignore}
spec:
  schedulerName: vgpud-scheduler
  containers:
  - name: main
    image: vgpud.local/busybox:1
    command: [sleep, "3600"]
    resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem-percentage: "50"}}
`
		if out, err := asTenant(yaml, "apply", "-f", "-"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		e.waitQuotaEvent(t, "skipper")
		p, err := e.kube.CoreV1().Pods(tenantNS).Get(ctx, "skipper", metav1.GetOptions{})
		if err != nil || p.Spec.NodeName != "" || p.Annotations[wellknown.AnnotationAssignment] != "" {
			t.Fatalf("over-quota pod bound: %v %v", err, p.Spec.NodeName)
		}
	})

	t.Run("twenty at once against a quota that fits one", func(t *testing.T) {
		// The victim asks 3000 MiB of an A100 and is charged a slot's
		// share, 4096 of 9000: one more pod of 10 % of a 40960 MiB A100
		// (4096 MiB) fits, a second does not. A percentage is
		// what neither the apiserver's own ResourceQuota (it counts
		// requests.nvidia.com/gpumem) nor admission can count, and the
		// opt-out label skips admission besides: bind's check is the only
		// one left, so this is the race it must win.
		kube := e.impersonate(t, tenant, nil)
		created := make([]string, 20)
		harness.Parallel(t, 20, 20, func(i int) error {
			p := gpuPod(fmt.Sprintf("race-%02d", i), map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "10"},
				map[string]string{wellknown.AnnotationUseGPUType: "A100"})
			p.Labels = map[string]string{"vgpud.io/webhook": "ignore"}
			p.Spec.SchedulerName = "vgpud-scheduler"
			created[i] = p.Name
			_, err := kube.CoreV1().Pods(tenantNS).Create(ctx, p, metav1.CreateOptions{})
			return err
		})
		var bound []string
		harness.Eventually(t, 60*time.Second, "one race pod bound, the rest told why", func() error {
			bound = nil
			waiting := 0
			for _, name := range created {
				if name == "" {
					continue
				}
				p, err := e.kube.CoreV1().Pods(tenantNS).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if p.Spec.NodeName != "" {
					bound = append(bound, name)
				} else {
					waiting++
				}
			}
			if len(bound) != 1 {
				return fmt.Errorf("bound %v", bound)
			}
			return nil
		})
		time.Sleep(3 * time.Second) // any late double bind would show now
		for _, name := range created {
			if name == "" || name == bound[0] {
				continue
			}
			p, err := e.kube.CoreV1().Pods(tenantNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Spec.NodeName != "" {
				t.Fatalf("%s bound too (%v): quota exceeded", name, err)
			}
		}
		// Every other pod is Pending and told why: the quota.
		pending := 0
		for _, name := range created {
			if name == "" || name == bound[0] {
				continue
			}
			p, err := e.kube.CoreV1().Pods(tenantNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodPending {
				t.Fatalf("%s: %v, phase %s; want Pending", name, err, p.Status.Phase)
			}
			e.waitQuotaEvent(t, name)
			pending++
		}
		t.Logf("20 created in parallel against a quota for one: %v bound, %d Pending with an event naming the quota", bound, pending)
	})
}

// waitQuotaEvent waits for the scheduler's event on pod naming the quota.
func (e env) waitQuotaEvent(t *testing.T, pod string) {
	t.Helper()
	harness.Eventually(t, 60*time.Second, pod+": an event naming the quota", func() error {
		evs, err := e.kube.CoreV1().Events(tenantNS).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if strings.Contains(ev.Message, "gpumem quota 9000 MiB") {
				t.Logf("%s: %s: %s", pod, ev.Reason, ev.Message)
				return nil
			}
		}
		return fmt.Errorf("%d events, none about the quota", len(evs.Items))
	})
}

// impersonate is a client acting as user.
func (e env) impersonate(t *testing.T, user string, extra map[string][]string) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.Impersonate.UserName = user
	rc.Impersonate.Extra = extra
	rc.QPS, rc.Burst = 100, 200
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}
