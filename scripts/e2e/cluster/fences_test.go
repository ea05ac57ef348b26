//go:build e2e

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/vgpud/vgpud/protocol/containerenv"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

const fencesNS = "e2e-fences"

// fences tries the second wave of attacks: as a tenant with edit (Pod
// Security baseline on its namespace), as a pod on the network, and with
// vgpud's own identity from the wrong node or a replica that does not
// lead. Each must be refused or harmless.
func fences(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	asTenant := newTenant(t, e, fencesNS)
	target := nodes[0]

	t.Run("a zero GPU count blocks no node", func(t *testing.T) {
		blocker := func(name, labels, scheduler string) string {
			return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s%s}
spec:
  %snodeSelector: {kubernetes.io/hostname: %s}
  initContainers: [{name: wait, image: vgpud.local/busybox:1, command: [sleep, "3600"]}]
  containers:
  - {name: main, image: vgpud.local/busybox:1, command: [sleep, "3600"], resources: {limits: {nvidia.com/gpu: "0"}}}
`, name, labels, scheduler, target)
		}
		out, err := asTenant(blocker("blocker", "", ""), "apply", "-f", "-")
		if err == nil || harness.Contains(out, "nvidia.com/gpu is 0", "remove nvidia.com/gpu") != nil {
			t.Fatalf("zero-count pod: %v %s", err, out)
		}
		t.Logf("refused at create: %s", lastLine(out))
		// Around the webhook (its opt-out label, vgpud's scheduler named
		// by hand): the filter refuses it, and it books nothing.
		if out, err := asTenant(blocker("blocker2", ", labels: {vgpud.io/webhook: ignore}", "schedulerName: vgpud-scheduler\n  "), "apply", "-f", "-"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		harness.Eventually(t, 60*time.Second, "blocker2 refused by the extender", func() error {
			return e.eventSays(fencesNS, "blocker2", "nvidia.com/gpu is 0")
		})
		p := gpuPod("after-blocker", map[string]string{"nvidia.com/gpumem": "1000"}, nil)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": target}
		if _, err := e.kube.CoreV1().Pods(fencesNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitRunning(t, fencesNS, []string{"after-blocker"}, 60*time.Second)
		if b, err := e.kube.CoreV1().Pods(fencesNS).Get(ctx, "blocker2", metav1.GetOptions{}); err != nil || b.Spec.NodeName != "" {
			t.Fatalf("blocker2 bound: %v", err)
		}
	})

	t.Run("the container's env cannot widen its slice", func(t *testing.T) {
		podWith := func(name, initEnv, mainEnv string) string {
			return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  initContainers:
  - name: init
    image: vgpud.local/busybox:1
    command: ["true"]
    env: [%s]
  containers:
  - name: main
    image: vgpud.local/busybox:1
    command: [sleep, "3600"]
    env: [%s]
    resources: {limits: {nvidia.com/gpumem: "1000"}}
`, name, initEnv, mainEnv)
		}
		// Every name vgpud owns, each kind where it is owned, at once.
		var all []string
		for _, n := range containerenv.SliceEnvNames() {
			all = append(all, fmt.Sprintf("{name: %s, value: x}", n))
		}
		for _, p := range containerenv.SliceEnvPrefixes() {
			all = append(all, fmt.Sprintf("{name: %s0, value: x}", p))
		}
		var devices []string
		for _, n := range containerenv.DeviceEnvNames() {
			devices = append(devices, fmt.Sprintf("{name: %s, value: all}", n))
		}
		for _, tc := range []struct{ name, yaml, want string }{
			{"env-memory", podWith("env-memory", "", "{name: CUDA_DEVICE_MEMORY_LIMIT_0, value: 80000m}"), "container main (CUDA_DEVICE_MEMORY_LIMIT_0)"},
			{"env-devices", podWith("env-devices", "{name: NVIDIA_VISIBLE_DEVICES, value: all}", ""), "container init (NVIDIA_VISIBLE_DEVICES)"},
			{"env-preload", podWith("env-preload", "", "{name: LD_PRELOAD, value: /tmp/x.so}"), "container main (LD_PRELOAD)"},
			{"env-policy", podWith("env-policy", "", "{name: GPU_CORE_UTILIZATION_POLICY, value: disable}"), "container main (GPU_CORE_UTILIZATION_POLICY)"},
			{"env-every-slice-name", podWith("env-every-slice-name", "", strings.Join(all, ", ")), "container main (" + strings.Join(append(containerenv.SliceEnvNames(), containerenv.SliceEnvPrefixes()[0]+"0", containerenv.SliceEnvPrefixes()[1]+"0"), ", ") + ")"},
			{"env-every-device-name", podWith("env-every-device-name", strings.Join(devices, ", "), ""), "container init (" + strings.Join(containerenv.DeviceEnvNames(), ", ") + ")"},
		} {
			out, err := asTenant(tc.yaml, "apply", "--dry-run=server", "-f", "-")
			if err == nil || harness.Contains(out, "ValidatingAdmissionPolicy 'vgpud-slice-env'", tc.want) != nil {
				t.Fatalf("%s: %v %s; want refused naming %s", tc.name, err, out, tc.want)
			}
			t.Logf("%s refused: %s", tc.name, lastLine(out))
		}
		// A container that asks for no GPU keeps the slice's names: a
		// preload of its own allocator is no way around a slice it has not.
		cpu := podWith("cpu-preload", "{name: LD_PRELOAD, value: /usr/lib/libjemalloc.so.2}, {name: CUDA_VISIBLE_DEVICES, value: \"0\"}", "")
		if out, err := asTenant(cpu, "apply", "--dry-run=server", "-f", "-"); err != nil {
			t.Fatalf("an init container that asks for no GPU, with LD_PRELOAD: %v %s", err, out)
		}
		t.Log("an init container that asks for no GPU may set LD_PRELOAD and CUDA_VISIBLE_DEVICES")
		// A pod that asks for no GPU at all is vgpud's business nowhere:
		// created for real, it runs with its preload as written.
		plain := `apiVersion: v1
kind: Pod
metadata: {name: cpu-jemalloc}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: vgpud.local/busybox:1
    command: [sh, -c, "echo preload=$LD_PRELOAD; sleep 3600"]
    env: [{name: LD_PRELOAD, value: /usr/lib/x86_64-linux-gnu/libjemalloc.so.2}]
`
		if out, err := asTenant(plain, "apply", "-f", "-"); err != nil {
			t.Fatalf("a CPU pod that preloads jemalloc: %v %s", err, out)
		}
		e.waitRunning(t, fencesNS, []string{"cpu-jemalloc"}, 60*time.Second)
		harness.Eventually(t, 30*time.Second, "the CPU pod's preload as written", func() error {
			raw, err := e.kube.CoreV1().Pods(fencesNS).GetLogs("cpu-jemalloc", &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				return err
			}
			if !slices.Contains(strings.Split(string(raw), "\n"), "preload=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2") {
				return fmt.Errorf("it printed %q", raw)
			}
			return nil
		})
		t.Log("a CPU pod that preloads jemalloc is admitted and runs with its LD_PRELOAD")
		// What the webhook injects passes the policy that runs after it: a
		// task priority (which reaches the container from the resource,
		// not from env) and the core policy.
		prio := strings.Replace(podWith("with-priority", "", ""), `nvidia.com/gpumem: "1000"`, `nvidia.com/gpumem: "1000", nvidia.com/priority: "1"`, 1)
		if out, err := asTenant(prio, "apply", "--dry-run=server", "-f", "-"); err != nil {
			t.Fatalf("a GPU pod asking for a task priority: %v %s", err, out)
		}
		// An ephemeral container added to a running GPU pod asks for no
		// GPU (it cannot): the device names are refused, the slice's
		// limit nothing it can reach (the hook voids its devices).
		p, err := e.kube.CoreV1().Pods(fencesNS).Get(ctx, "after-blocker", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: "vgpud.local/busybox:1", Command: []string{"true"},
			Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}, {Name: "CUDA_DEVICE_MEMORY_LIMIT_0", Value: "80000m"}}}})
		_, err = e.kube.CoreV1().Pods(fencesNS).UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{})
		if err == nil || !strings.Contains(err.Error(), "container debug (NVIDIA_VISIBLE_DEVICES)") {
			t.Fatalf("ephemeral container: %v", err)
		}
		t.Logf("ephemeral container refused: %v", err)
	})

	t.Run("selector lists are bounded", func(t *testing.T) {
		long := strings.Repeat("A100,", 40000)
		p := gpuPod("long-selector", map[string]string{"nvidia.com/gpumem": "1000"}, map[string]string{wellknown.AnnotationNoUseGPUType: long})
		_, err := e.impersonate(t, "system:serviceaccount:"+fencesNS+":tenant", nil).CoreV1().Pods(fencesNS).Create(ctx, p, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "annotation nvidia.com/nouse-gputype is longer than 4096 bytes") {
			t.Fatalf("long selector at create: %v", err)
		}
		// Patched onto a pending pod after admission: the filter refuses
		// it at once rather than matching it against every GPU.
		// Pending first: no GPU is of that type, so the filter says no.
		p = gpuPod("patched-selector", map[string]string{"nvidia.com/gpumem": "1000"}, map[string]string{wellknown.AnnotationUseGPUType: "NoSuchGPU"})
		if _, err := e.kube.CoreV1().Pods(fencesNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, 60*time.Second, "patched-selector refused for its GPU type", func() error {
			return e.eventSays(fencesNS, "patched-selector", "use/nouse-gputype")
		})
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{wellknown.AnnotationUseGPUType: long}}})
		if out, err := asTenant(string(body), "patch", "pod", "patched-selector", "--type=merge", "--patch-file=/dev/stdin"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		harness.Eventually(t, 60*time.Second, "the pending pod's long selector refused", func() error {
			return e.eventSays(fencesNS, "patched-selector", "longer than 4096 bytes")
		})
	})

	t.Run("vgpud's identity reaches no further than its replica", func(t *testing.T) {
		pinned, err := e.kube.CoreV1().Pods(fencesNS).Get(ctx, "after-blocker", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		leader, err := e.leader()
		if err != nil {
			t.Fatal(err)
		}
		other := e.otherReplica(t, leader, nodes, pinned.Spec.NodeName)
		as := e.asReplica(t, other)
		refused := func(what string, err error, want string) {
			t.Helper()
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s as replica %s: %v, want refused with %q", what, other.Name, err, want)
				return
			}
			t.Logf("%s: refused: %v", what, err)
		}
		_, err = as.CoreV1().Pods(fencesNS).Patch(ctx, pinned.Name, types.StrategicMergePatchType,
			[]byte(`{"spec":{"containers":[{"name":"main","image":"vgpud.local/pause:1"}]}}`), metav1.PatchOptions{})
		refused("swap another tenant's image", err, "vgpud changes no spec of a pod or node")
		_, err = as.CoreV1().Pods(fencesNS).Patch(ctx, pinned.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"x"}}}`), metav1.PatchOptions{})
		refused("label another tenant's pod", err, "vgpud changes no labels")
		_, err = as.CoreV1().Pods(fencesNS).Patch(ctx, pinned.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"vgpud.io/phase":"bound"}}}`), metav1.PatchOptions{})
		refused("write the phase of a pod on another node", err, "writes vgpud.io/phase only on pods bound to its own node")
		_, err = as.CoreV1().Pods(fencesNS).Patch(ctx, pinned.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"vgpud.io/assignment":"{}"}}}`), metav1.PatchOptions{})
		refused("patch an assignment", err, "refused: vgpud.io/assignment")

		idle := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unscheduled"}, Spec: corev1.PodSpec{SchedulerName: "e2e-nobody",
			Containers: []corev1.Container{{Name: "main", Image: "vgpud.local/busybox:1", Command: []string{"sleep", "3600"}}}}}
		if _, err := e.kube.CoreV1().Pods(fencesNS).Create(ctx, idle, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		err = as.CoreV1().Pods(fencesNS).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "unscheduled"}, Target: corev1.ObjectReference{Kind: "Node", Name: other.Spec.NodeName}}, metav1.CreateOptions{})
		refused("bind a pod without the Lease", err, "only the replica holding the vgpud-leader Lease binds pods")
		_, err = as.CoreV1().Pods(fencesNS).Patch(ctx, "unscheduled", types.MergePatchType, []byte(`{"metadata":{"annotations":{"vgpud.io/requeued":"now"}}}`), metav1.PatchOptions{})
		refused("nudge a pod without the Lease", err, "only the replica holding the vgpud-leader Lease nudges pods")
		_, err = as.CoreV1().Pods(system).Patch(ctx, other.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"vgpud.io/role":"leader"}}}`), metav1.PatchOptions{})
		refused("label itself leader without the Lease", err, "only the replica holding the vgpud-leader Lease labels a pod leader")
		_, err = as.CoreV1().Pods(system).Patch(ctx, leader.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"vgpud.io/role":null}}}`), metav1.PatchOptions{})
		refused("take the leader's label away", err, "removes the leader label only from its own pod")

		mwc, err := e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "vgpud", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// These the leader alone keeps, and even it only in part: tried
		// with the leader's own identity too.
		asLeader := e.asReplica(t, leader)
		mwc.Webhooks[0].ClientConfig.Service.Name = "attacker"
		_, err = as.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{})
		refused("point the webhook elsewhere", err, "only the replica holding the vgpud-leader Lease keeps the mutatingwebhookconfigurations")
		_, err = asLeader.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{})
		refused("point the webhook elsewhere, as the leader", err, "vgpud changes only the caBundle of its own webhook configuration")
		mwc.Webhooks[0].ClientConfig.Service.Name = "vgpud"
		// Its failurePolicy is Ignore (the vgpud-gpu-pods policy holds
		// what must hold); Fail would refuse every GPU pod.
		fail := admissionregistrationv1.Fail
		mwc.Webhooks[0].FailurePolicy = &fail
		_, err = asLeader.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{})
		refused("make the webhook refuse GPU pods whenever it fails, as the leader", err, "vgpud changes only the caBundle")
		ignore := admissionregistrationv1.Ignore
		mwc.Webhooks[0].FailurePolicy = &ignore
		mwc.Webhooks[0].MatchConditions = nil
		_, err = asLeader.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{})
		refused("send every pod to the webhook, as the leader", err, "vgpud changes only the caBundle")
		swap := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"kube-scheduler","image":"vgpud.local/pause:1"}]}}}}`)
		// vgpud restarts kube-scheduler by deleting its pods: the
		// Deployment is only read (RBAC), and deleting is fenced to those
		// pods and the leader (vgpud-own-writes). Dry runs: admission
		// judges them as it would the real thing.
		_, err = as.AppsV1().Deployments(system).Patch(ctx, "vgpud-scheduler", types.StrategicMergePatchType, swap, metav1.PatchOptions{})
		refused("swap the scheduler's image", err, `cannot patch resource "deployments"`)
		_, err = asLeader.AppsV1().Deployments(system).Patch(ctx, "vgpud-scheduler", types.StrategicMergePatchType, swap, metav1.PatchOptions{})
		refused("swap the scheduler's image, as the leader", err, `cannot patch resource "deployments"`)
		_, err = asLeader.AppsV1().Deployments(system).Patch(ctx, "vgpud-scheduler", types.MergePatchType, []byte(`{"spec":{"paused":true}}`), metav1.PatchOptions{})
		refused("pause the scheduler's rollouts, as the leader", err, `cannot patch resource "deployments"`)
		dryDelete := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
		err = asLeader.CoreV1().Pods(system).Delete(ctx, other.Name, dryDelete)
		refused("delete another vgpud replica, as the leader", err, "vgpud deletes only the pods of kube-scheduler")
		err = asLeader.CoreV1().Pods(fencesNS).Delete(ctx, pinned.Name, dryDelete)
		refused("delete a tenant's pod, as the leader", err, `cannot delete resource "pods"`)
		// kube-scheduler's labels on a pod no ReplicaSet controls, as a
		// node's kubelet could write a mirror pod.
		lookalike := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "scheduler-lookalike", Labels: map[string]string{"app.kubernetes.io/name": "vgpud-scheduler"},
			Annotations: map[string]string{"vgpud.io/runtime-hook-optional": "true"}},
			Spec: corev1.PodSpec{SchedulerName: "e2e-nobody", Containers: []corev1.Container{{Name: "main", Image: "vgpud.local/pause:1"}}}}
		if _, err := e.kube.CoreV1().Pods(system).Create(ctx, lookalike, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		err = asLeader.CoreV1().Pods(system).Delete(ctx, lookalike.Name, dryDelete)
		refused("delete a pod with kube-scheduler's labels but no ReplicaSet, as the leader", err, "vgpud deletes only the pods of kube-scheduler")
		if err := e.kube.CoreV1().Pods(system).Delete(ctx, lookalike.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Error(err)
		}
		if sp, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=vgpud-scheduler"}); err == nil && len(sp.Items) > 0 {
			err = as.CoreV1().Pods(system).Delete(ctx, sp.Items[0].Name, dryDelete)
			refused("restart kube-scheduler without the Lease", err, "only the replica holding the vgpud-leader Lease restarts kube-scheduler")
			if err := asLeader.CoreV1().Pods(system).Delete(ctx, sp.Items[0].Name, dryDelete); err != nil {
				t.Errorf("the leader may restart kube-scheduler (dry run): %v", err)
			}
		} else {
			t.Errorf("no scheduler pod to try: %v", err)
		}
		_, err = asLeader.CoreV1().Pods(fencesNS).Patch(ctx, pinned.Name, types.StrategicMergePatchType,
			[]byte(`{"spec":{"containers":[{"name":"main","image":"vgpud.local/pause:1"}]}}`), metav1.PatchOptions{})
		refused("swap another tenant's image, as the leader", err, "vgpud changes no spec of a pod or node")

		_, err = as.CoreV1().Pods(fencesNS).Patch(ctx, pinned.Name, types.MergePatchType,
			[]byte(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000000"}]}}`), metav1.PatchOptions{})
		refused("give another tenant's pod a made-up owner (garbage collection)", err, "vgpud changes no owner references or finalizers")
		_, err = as.CoreV1().Pods(fencesNS).Patch(ctx, pinned.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":["e2e/hold"]}}`), metav1.PatchOptions{})
		refused("hold another tenant's pod with a finalizer", err, "vgpud changes no owner references or finalizers")
		if sp, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=vgpud-scheduler"}); err == nil && len(sp.Items) > 0 {
			_, err = as.CoreV1().Pods(system).Patch(ctx, sp.Items[0].Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"vgpud.io/tls-hash":"forged"}}}`), metav1.PatchOptions{})
			refused("forge the scheduler pod's certificate hash", err, "vgpud changes only the annotations vgpud.io/phase, vgpud.io/requeued on pods; refused: vgpud.io/tls-hash")
		} else {
			t.Errorf("no scheduler pod to try: %v", err)
		}
		mwc, err = e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "vgpud", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mwc.Webhooks[0].ClientConfig.CABundle = []byte("not a CA")
		_, err = as.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{})
		refused("break the webhook's caBundle without the Lease", err, "only the replica holding the vgpud-leader Lease keeps the mutatingwebhookconfigurations")
		secret, err := e.kube.CoreV1().Secrets(system).Get(ctx, "vgpud-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		secret.Data["ca.crt"] = []byte("not a CA")
		_, err = as.CoreV1().Secrets(system).Update(ctx, secret, metav1.UpdateOptions{})
		refused("replace the CA without the Lease", err, "only the replica holding the vgpud-leader Lease keeps the secrets")
		// No pod is created already labelled leader, by anyone: a node's
		// kubelet writing a mirror pod into vgpud-system would otherwise
		// join the webhook's Service.
		impostor := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "impostor", Labels: map[string]string{"app.kubernetes.io/name": "vgpud", wellknown.LabelRole: wellknown.RoleLeader},
			Annotations: map[string]string{"vgpud.io/runtime-hook-optional": "true"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "vgpud.local/busybox:1"}}}}
		_, err = e.kube.CoreV1().Pods(system).Create(ctx, impostor, metav1.CreateOptions{})
		refused("create a pod labelled leader (as cluster admin)", err, "the vgpud.io/role label routes vgpud's Service")

		// Nothing above changed the pod it aimed at.
		after, err := e.kube.CoreV1().Pods(fencesNS).Get(ctx, pinned.Name, metav1.GetOptions{})
		if err != nil || after.Spec.Containers[0].Image != pinned.Spec.Containers[0].Image || after.Annotations[wellknown.AnnotationPhase] != pinned.Annotations[wellknown.AnnotationPhase] {
			t.Fatalf("pinned pod changed: %v", err)
		}
	})

	t.Run("metrics need a token that may read them", func(t *testing.T) {
		leader, err := e.leader()
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.scrapeAs(leader, "")
		if err == nil || !strings.Contains(err.Error(), "HTTP 401") {
			t.Fatalf("without a token: %v", err)
		}
		secs := int64(600)
		for _, aud := range [][]string{nil, {metricsAudience}} {
			tr, err := e.kube.CoreV1().ServiceAccounts(fencesNS).CreateToken(ctx, "tenant", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &secs, Audiences: aud}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.scrapeAs(leader, tr.Status.Token)
			want := []string{"HTTP 403", "vgpud-metrics-reader"}
			if aud == nil {
				// The apiserver's audience: a replica sent it could use it
				// against the apiserver, so it is not taken.
				want = []string{"HTTP 401", "audience " + metricsAudience}
			}
			if err == nil || harness.Contains(err.Error(), want...) != nil {
				t.Fatalf("with the tenant's token for audiences %v: %v", aud, err)
			}
			t.Logf("tenant's token for audiences %v: %v", aud, err)
		}
		raw, err := e.scrape(leader)
		if err != nil || !strings.Contains(raw, "vgpud_leader 1") {
			t.Fatalf("as the scraper: %v", err)
		}
	})

	t.Run("a flood of large reviews restarts nothing", func(t *testing.T) { reviewFlood(t, e) })

	t.Run("an exclusive GPU is charged its whole memory", func(t *testing.T) {
		if _, err := e.kube.CoreV1().ResourceQuotas(fencesNS).Create(ctx, &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
			Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.nvidia.com/gpumem": resource.MustParse("3000")}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.emptyNamespace(t, fencesNS)
		exclusive := func(i int, optOut bool) string {
			labels := ""
			if optOut {
				labels = ", labels: {vgpud.io/webhook: ignore}"
			}
			sched := ""
			if optOut {
				sched = "  schedulerName: vgpud-scheduler\n"
			}
			return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: exclusive-%d%s}
spec:
%s  containers:
  - {name: main, image: vgpud.local/busybox:1, command: [sleep, "3600"], resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "1", nvidia.com/gpucores: "100"}}}
`, i, labels, sched)
		}
		for i := range 4 {
			out, err := asTenant(exclusive(i, false), "apply", "-f", "-")
			if err == nil || harness.Contains(out, "gpumem quota 3000 MiB", "counting its whole memory") != nil {
				t.Fatalf("exclusive-%d: %v %s", i, err, out)
			}
			if i == 0 {
				t.Logf("refused at create: %s", lastLine(out))
			}
		}
		// Around the webhook: bind charges the GPU chosen, whole.
		if out, err := asTenant(exclusive(9, true), "apply", "-f", "-"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		harness.Eventually(t, 60*time.Second, "bind refuses exclusive-9 for the quota", func() error {
			return e.eventSays(fencesNS, "exclusive-9", "gpumem quota 3000 MiB, in use 0", "counting its whole memory")
		})
		grace := int64(0)
		if err := e.kube.CoreV1().Pods(fencesNS).Delete(ctx, "exclusive-9", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			t.Fatal(err)
		}
		// Room for one whole GPU (the largest here is 40960 MiB), never two
		// (the smallest two are 2 x 23034): the first runs, charged its
		// GPU's memory, and the second is refused at bind for it.
		// A patch: the quota controller writes the object's status
		// meanwhile, and an update could meet its conflict.
		if _, err := e.kube.CoreV1().ResourceQuotas(fencesNS).Patch(ctx, "gpu", types.MergePatchType,
			[]byte(`{"spec":{"hard":{"requests.nvidia.com/gpumem":"45000"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, 30*time.Second, "exclusive-0 admitted under 45000 MiB", func() error {
			out, err := asTenant(exclusive(0, false), "apply", "-f", "-")
			if err != nil {
				return fmt.Errorf("%v %s", err, out)
			}
			return nil
		})
		e.waitRunning(t, fencesNS, []string{"exclusive-0"}, 60*time.Second)
		if out, err := asTenant(exclusive(1, false), "apply", "-f", "-"); err != nil {
			t.Fatalf("exclusive-1 refused at create (admission counts exclusive-0 at what it names): %v %s", err, out)
		}
		harness.Eventually(t, 60*time.Second, "bind refuses exclusive-1: exclusive-0 is charged a whole GPU", func() error {
			return e.eventSays(fencesNS, "exclusive-1", "gpumem quota 45000 MiB, in use ", "counting its whole memory")
		})
		if p, err := e.kube.CoreV1().Pods(fencesNS).Get(ctx, "exclusive-1", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
			t.Fatalf("exclusive-1 bound beside a whole GPU under 45000 MiB: %v", err)
		}
	})

	t.Run("a slice is charged what it denies others", func(t *testing.T) { slotCharge(t, e, fencesNS) })
	t.Run("all a GPU's memory is charged every core", func(t *testing.T) { wholeMemoryCharge(t, e, fencesNS) })

	// Last: it moves leadership.
	t.Run("a replica writes the Lease only for itself, from a node that may lead", func(t *testing.T) { leaseWriters(t, e, nodes) })
	t.Run("a Lease taken out of turn shows", func(t *testing.T) { leaseTaken(t, e, nodes) })
}

// leaseEvent is nil once an Event on the leader Lease, posted after
// since, has reason and names by.
func (e env) leaseEvent(reason, by string, since time.Time) error {
	evs, err := e.kube.CoreV1().Events(system).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=vgpud-leader"})
	if err != nil {
		return err
	}
	var seen []string
	for _, ev := range evs.Items {
		if ev.EventTime.Time.Before(since.Add(-time.Second)) {
			continue
		}
		seen = append(seen, ev.Reason)
		if ev.Reason == reason && strings.Contains(ev.Message, by) {
			return nil
		}
	}
	return fmt.Errorf("Events on the Lease since %s: %v, none %s naming %s", since.Format("15:04:05"), seen, reason, by)
}

// eventSays returns nil once some Event on pod holds every one of subs.
func (e env) eventSays(ns, pod string, subs ...string) error {
	evs, err := e.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		return err
	}
	var seen []string
	for _, ev := range evs.Items {
		if harness.Contains(ev.Message, subs...) == nil {
			return nil
		}
		seen = append(seen, ev.Reason+": "+ev.Message)
	}
	return fmt.Errorf("no event on %s says %q; seen %q", pod, subs, seen)
}

// reviewFlood sends the leader's webhook port, from the pod network, 8
// and then 50 AdmissionReviews of ~5 MB at once (a pod with 90 000 env
// entries), while GPU pods are created through the apiserver. No vgpud
// container may restart, the leader must not change, and every pod must
// be admitted and run.
func reviewFlood(t *testing.T, e env) {
	ctx := context.Background()
	leader, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	body := floodReview(t)
	type restart struct {
		count int32
		last  string // how the container last ended
	}
	restarts := func() map[string]restart {
		out := map[string]restart{}
		pods, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			for _, s := range p.Status.ContainerStatuses {
				r := restart{count: s.RestartCount}
				if term := s.LastTerminationState.Terminated; term != nil {
					r.last = fmt.Sprintf("%s (exit %d) at %s: %s", term.Reason, term.ExitCode, term.FinishedAt.Format(time.RFC3339), term.Message)
				}
				out[p.Name+"/"+s.Name] = r
			}
		}
		return out
	}
	// Problems are gathered and reported once, after a dump of the
	// cluster's state, so the reason is the test's last line.
	var (
		mu       sync.Mutex
		problems []string
	)
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) > 0 {
			e.dump(t, fencesNS)
			lease, err := e.kubectl("-n", system, "get", "lease", "vgpud-leader", "-o", "jsonpath={.spec}")
			t.Logf("the Lease now: %s %v", lease, err)
			logs, err := e.kubectl("-n", system, "logs", "-l", "app.kubernetes.io/component=node", "--prefix", "--tail=-1")
			for _, l := range strings.Split(logs, "\n") {
				if strings.Contains(l, "leading") || strings.Contains(l, "renew") || strings.Contains(l, "handing over") || strings.Contains(l, "became leader") || strings.Contains(l, "leader observed") || strings.Contains(l, "connection ended") {
					t.Log(l)
				}
			}
			if err != nil {
				t.Logf("vgpud's logs: %v", err)
			}
			t.Errorf("the flood (leader %s on %s):\n%s", leader.Name, leader.Spec.NodeName, strings.Join(problems, "\n"))
		}
	}()
	before := restarts()
	for round, n := range []int{8, 50} {
		var (
			maxRSS  float64
			latency []time.Duration
		)
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { // the leader's memory, as its metrics say
			for {
				if raw, err := e.scrape(leader); err == nil {
					if v, _, err := harness.MetricSums(strings.NewReader(raw), "process_resident_memory_bytes", func(map[string]string) string { return "" }); err == nil {
						mu.Lock()
						maxRSS = max(maxRSS, v[""])
						mu.Unlock()
					}
				}
				select {
				case <-done:
					return
				case <-time.After(300 * time.Millisecond):
				}
			}
		})
		wg.Go(func() { // ordinary GPU pods, created during the flood
			for i := range 10 {
				p := gpuPod(fmt.Sprintf("during-%d-%d", round, i), map[string]string{"nvidia.com/gpumem": "100"}, nil)
				start := time.Now()
				_, err := e.kube.CoreV1().Pods(fencesNS).Create(ctx, p, metav1.CreateOptions{})
				mu.Lock()
				latency = append(latency, time.Since(start))
				mu.Unlock()
				if err != nil {
					problem("create %s during the flood, after %s: %v", p.Name, time.Since(start).Round(time.Millisecond), err)
				}
			}
		})
		// Each line: the status code, curl's exit code, and curl's error.
		script := fmt.Sprintf(`for i in $(seq %d); do curl -sk -o /dev/null -w '%%{http_code} %%{exitcode} %%{time_total}s %%{errormsg}\n' --max-time 60 -H 'Content-Type: application/json' --data-binary @%s https://%s:9443/webhook & done; wait`,
			n, body, leader.Status.PodIP)
		start := time.Now()
		out, err := exec.Command("nsenter", "--net=/var/run/netns/vgpud-e2e", "bash", "-c", script).CombinedOutput()
		took := time.Since(start)
		if err != nil {
			close(done)
			wg.Wait()
			t.Fatalf("flood: %v %s", err, out)
		}
		// Each review answered, refused for load, or cut off by one of
		// the listener's own deadlines: on two starved cores a flooding
		// client can miss the TLS handshake's 5 s, HTTP/2's 2 s for its
		// SETTINGS, or the 15 s for its body (a 400), and the attacker is
		// owed no cleaner answer. Anything else (nothing listening, a 5xx,
		// a 413 for a body under the limit) is a fault.
		var codes []string
		ok := 0
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			code := f[0]
			codes = append(codes, code)
			switch {
			case code == "200":
				ok++
			case code == "429":
			case code == "000" && len(f) > 1 && f[1] != "7", // 7: nothing listened
				code == "400" && len(f) > 2 && curlSeconds(f[2]) >= 15:
				t.Logf("round of %d: a review was cut off by the listener's deadlines: %q (code, curl's exit code, time, curl's error)", n, line)
			default:
				problem("round of %d: a review was answered %q (code, curl's exit code, time, curl's error)", n, line)
			}
		}
		tallied := tally(strings.Join(codes, " "))
		if ok == 0 {
			problem("round of %d: no review of the flood answered: %s", n, tallied)
		}
		time.Sleep(2 * time.Second)
		close(done)
		wg.Wait()
		slices.Sort(latency)
		var names []string
		for i := range 10 {
			names = append(names, fmt.Sprintf("during-%d-%d", round, i))
		}
		e.waitRunning(t, fencesNS, names, 120*time.Second)
		t.Logf("%d reviews of %.1f MB at once: answered %s in %s; leader RSS peak %.0f MiB; 10 GPU pods created meanwhile, create latency p50 %s max %s, all Running",
			n, float64(fileSize(t, body))/1e6, tallied, took.Round(time.Millisecond), maxRSS/(1<<20), latency[len(latency)/2].Round(time.Millisecond), latency[len(latency)-1].Round(time.Millisecond))
	}
	after := restarts()
	for k, v := range after {
		if v.count != before[k].count {
			problem("%s restarted during the flood: %d -> %d, last %s", k, before[k].count, v.count, v.last)
		}
	}
	if now, err := e.leader(); err != nil || now.Name != leader.Name {
		name := ""
		if now != nil {
			name = now.Name
		}
		problem("leader changed during the flood: now %q %v", name, err)
	}
}

// floodReview writes the flood's AdmissionReview to a file and names it.
func floodReview(t *testing.T) string {
	env := make([]corev1.EnvVar, 90000)
	for i := range env {
		env[i] = corev1.EnvVar{Name: fmt.Sprintf("VARIABLE_NUMBER_%d", i), Value: "some-value-xx"}
	}
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "flood", Namespace: fencesNS}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "main", Image: "vgpud.local/busybox:1", Env: env,
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpumem": resource.MustParse("1000")}}}}}}
	raw, err := json.Marshal(&pod)
	if err != nil {
		t.Fatal(err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "flood", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Operation: admissionv1.Create, Namespace: fencesNS, Name: "flood",
			Object: runtime.RawExtension{Raw: raw}},
	}
	data, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "review.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func fileSize(t *testing.T, path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// tally counts curl's status codes: "200×6 429×2".
// curlSeconds reads curl's time_total ("7.002392s"); 0 if unreadable.
func curlSeconds(s string) float64 {
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "s"), 64)
	if err != nil {
		return 0
	}
	return v
}

func tally(out string) string {
	counts := map[string]int{}
	for _, c := range strings.Fields(out) {
		counts[c]++
	}
	var parts []string
	for _, c := range slices.Sorted(func(yield func(string) bool) {
		for k := range counts {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s×%d", c, counts[c]))
	}
	return strings.Join(parts, " ")
}

// lastLine is kubectl's last line of output: its answer, after any
// warnings (Pod Security's) printed first.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// otherReplica is a vgpud replica other than leader, not on node offNode
// ("" for any node).
func (e env) otherReplica(t *testing.T, leader *corev1.Pod, nodes []string, offNode string) *corev1.Pod {
	t.Helper()
	var other *corev1.Pod
	for _, n := range nodes {
		if vp, err := e.vgpudPod(n); err == nil && vp.Name != leader.Name && n != offNode {
			other = vp
		}
	}
	if other == nil {
		t.Fatalf("no replica but the leader %s off node %q", leader.Name, offNode)
	}
	return other
}

// leaseWriters writes the Lease with a replica's token as a compromised
// node would: naming another holder, deleting it, and, once the vgpud
// ConfigMap's leader-nodes names only the leader's node, taking it for a
// replica elsewhere. The apiserver refuses each (policy vgpud-lease).
func leaseWriters(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	leader, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	other := e.otherReplica(t, leader, nodes, leader.Spec.NodeName)
	as := e.asReplica(t, other)
	leases := as.CoordinationV1().Leases(system)
	// Dry run: admission decides, nothing is written, so a probe the
	// policy let through would not change the leader.
	take := func(holder string) error { return takeLease(ctx, as, holder, true) }
	refused := func(what string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s as replica %s: %v, want refused with %q", what, other.Name, err, want)
		}
		t.Logf("%s: refused: %v", what, err)
	}
	refused("name another pod the holder", take(leader.Name+"-impostor"), "writes only itself in as the Lease holder")
	// RBAC refuses it first; the policy too, should a Role grant it.
	refused("delete the Lease", leases.Delete(ctx, "vgpud-leader", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}), "forbidden")
	// Nor have the garbage collector delete it: an owner that does not
	// exist (the Lease gone, every fence that reads it would check nothing).
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := leases.Get(ctx, "vgpud-leader", metav1.GetOptions{})
		if err != nil {
			return err
		}
		// Written as a take for itself, which the holder rule allows.
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity = &other.Name
		lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
		lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "vgpud", UID: "00000000-0000-0000-0000-000000000000"}}
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	refused("give the Lease an owner that does not exist", err, "changes no owner or finalizer of the Lease")
	// kube-scheduler's token, on a compromised node, writes its own
	// election Lease and no other.
	sched := e.impersonate(t, "system:serviceaccount:vgpud-system:vgpud-scheduler", nil).CoordinationV1().Leases(system)
	if l, err := sched.Get(ctx, "vgpud-leader", metav1.GetOptions{}); err == nil {
		t.Fatalf("vgpud-scheduler's token reads the vgpud-leader Lease (holder %v)", l.Spec.HolderIdentity)
	}
	_, err = sched.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "vgpud-leader-2", Namespace: system}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	refused("vgpud-scheduler creating another Lease", err, "vgpud-scheduler writes only its own election Lease")
	if err := take(other.Name); err != nil {
		t.Fatalf("replica %s taking the Lease for itself, with every node free to lead (dry run): %v", other.Name, err)
	}

	cms := e.kube.CoreV1().ConfigMaps(system)
	setLeaderNodes := func(v string) {
		t.Helper()
		patch := fmt.Sprintf(`{"data":{"leader-nodes":%q}}`, v)
		if _, err := cms.Patch(ctx, "vgpud", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setLeaderNodes(leader.Spec.NodeName)
	t.Cleanup(func() {
		setLeaderNodes("")
		// Every node may lead again once the policy has read it back.
		harness.Eventually(t, 30*time.Second, "every node free to lead again", func() error { return take(other.Name) })
	})
	// The policy reads the ConfigMap from the apiserver's informer.
	harness.Eventually(t, 30*time.Second, "the Lease refused to a replica off the nodes that may lead", func() error {
		err := take(other.Name)
		if err == nil {
			return fmt.Errorf("replica %s on %s may still take the Lease (leader-nodes %s)", other.Name, other.Spec.NodeName, leader.Spec.NodeName)
		}
		return harness.Contains(err.Error(), "only replicas on the nodes the vgpud ConfigMap's leader-nodes names lead")
	})
	t.Logf("leader-nodes %s: replica %s on %s may not take the Lease", leader.Spec.NodeName, other.Name, other.Spec.NodeName)
	if l, err := e.leader(); err != nil || l.Name != leader.Name {
		t.Errorf("leader now %v (%v), want %s unchanged", l, err, leader.Name)
	}
}

// asReplica is a client holding the token vgpud's replica p holds: the
// service account, bound to p and to its node.
func (e env) asReplica(t *testing.T, p *corev1.Pod) kubernetes.Interface {
	t.Helper()
	return e.impersonate(t, "system:serviceaccount:vgpud-system:vgpud", map[string][]string{
		"authentication.kubernetes.io/pod-name":  {p.Name},
		"authentication.kubernetes.io/node-name": {p.Spec.NodeName},
	})
}

// takeLease writes holder into the leader Lease through as, acquired and
// renewed now, as a dry run when dry.
func takeLease(ctx context.Context, as kubernetes.Interface, holder string, dry bool) error {
	leases := as.CoordinationV1().Leases(system)
	// The leader renews every half second: a write of what was read just
	// before may meet a renewal (a conflict, before admission decides).
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := leases.Get(ctx, "vgpud-leader", metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity = &holder
		lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
		opts := metav1.UpdateOptions{}
		if dry {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = leases.Update(ctx, lease, opts)
		return err
	})
}

// leaseTaken takes the Lease, with vgpud's identity, for a replica that
// does not lead, while the leader's hold is current: what a compromised
// node can still do. The displaced leader must say so (an Event on the
// Lease, its metric), and the cluster must go on placing pods.
func leaseTaken(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	leader, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	other := e.otherReplica(t, leader, nodes, "")
	as := e.asReplica(t, other)
	warned := func() float64 {
		t.Helper()
		raw, err := e.kubectl("get", "--raw", "/metrics")
		if err != nil {
			t.Fatalf("the apiserver's metrics: %v", err)
		}
		sums, _, err := harness.MetricSums(strings.NewReader(raw), "apiserver_validating_admission_policy_check_total", func(l map[string]string) string {
			if l["policy"] == "vgpud-lease-takeover" && l["enforcement_action"] == "warn" {
				return "warn"
			}
			return ""
		})
		if err != nil {
			t.Fatal(err)
		}
		return sums["warn"]
	}
	before := warned()
	if err := takeLease(ctx, as, other.Name, false); err != nil {
		t.Fatalf("take the Lease as %s: %v", other.Name, err)
	}
	// The apiserver records it whoever wrote it: no vgpud code need run.
	if after := warned(); after < before+1 {
		t.Fatalf("vgpud-lease-takeover warned %v times, %v before the takeover", after, before)
	}
	harness.Eventually(t, 30*time.Second, "an Event on the Lease naming the taker", func() error {
		evs, err := e.kube.CoreV1().Events(system).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=vgpud-leader"})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.Reason == "LeaseTakenOutOfTurn" && strings.Contains(ev.Message, other.Name) {
				t.Logf("%s: %s", ev.Reason, ev.Message)
				return nil
			}
		}
		return fmt.Errorf("%d Events on the Lease, none LeaseTakenOutOfTurn", len(evs.Items))
	})
	harness.Eventually(t, 30*time.Second, "the displaced leader counts it", func() error {
		raw, err := e.scrape(leader)
		if err != nil {
			return err
		}
		sums, _, err := harness.MetricSums(strings.NewReader(raw), "vgpud_leader_lease_taken_total", func(map[string]string) string { return "" })
		if err != nil || sums[""] != 1 {
			return fmt.Errorf("vgpud_leader_lease_taken_total %v (%v)", sums, err)
		}
		return nil
	})
	// The cluster goes on: some replica leads, and a GPU pod runs.
	p := gpuPod("after-takeover", map[string]string{"nvidia.com/gpumem": "100"}, nil)
	harness.Eventually(t, 60*time.Second, "a GPU pod admitted after the takeover", func() error {
		_, err := e.kube.CoreV1().Pods(fencesNS).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	e.waitRunning(t, fencesNS, []string{"after-takeover"}, 90*time.Second)
	if l, err := e.leader(); err == nil {
		t.Logf("leader after the takeover: %s (was %s, taken for %s)", l.Name, leader.Name, other.Name)
	}
}
