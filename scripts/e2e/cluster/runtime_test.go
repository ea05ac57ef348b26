//go:build e2e

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// runtimeIdentity attacks what a container sees, as a tenant, on nodes
// whose containerd names each container's pod to vgpud's NRI hook: a pod
// vgpud did not place never gets a GPU and no victim fails; the pod's
// env, envFrom and image never widen a slice; a container without a
// booking sees no GPU; and with the hook stopped no GPU container starts
// at all. Each reads the container's real environment.
func runtimeIdentity(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	ns := "e2e-runtime"
	asTenant := newTenant(t, e, ns)
	for _, n := range nodes {
		node, err := e.kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if id := node.Annotations[wellknown.AnnotationIdentity]; id != wellknown.IdentityRuntime {
			t.Fatalf("node %s: %s=%q, want %q (containerd with NRI)", n, wellknown.AnnotationIdentity, id, wellknown.IdentityRuntime)
		}
		// Each node read its containerd's configuration through the
		// drop-in it imports, and says it fails closed, to the API and
		// to inspect.
		var check protocol.RuntimeCheck
		if err := json.Unmarshal([]byte(node.Annotations[wellknown.AnnotationRuntime]), &check); err != nil || check.Result != protocol.RuntimeFailsClosed || len(check.Problems) > 0 {
			t.Fatalf("node %s: %s=%q (%v), want fails-closed with no problem", n, wellknown.AnnotationRuntime, node.Annotations[wellknown.AnnotationRuntime], err)
		}
		s := e.inspect(t, n)
		if c := s.RuntimeCheck; c == nil || c.Result != protocol.RuntimeFailsClosed || !slices.Contains(c.Files, "/etc/containerd/conf.d/vgpud.toml") {
			t.Fatalf("node %s: inspect's runtime check %+v, want fails-closed through /etc/containerd/conf.d/vgpud.toml", n, c)
		}
	}
	t.Logf("every node's containerd fails closed without vgpud, read through its drop-in: %v", nodes)
	target := nodes[0]
	// pod is a busybox pod printing its GPU env, placed on target by a
	// nodeSelector or, pinned, by spec.nodeName.
	pod := func(name, image, extraMeta, extraSpec, limits string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
%sspec:
%s  containers:
  - name: main
    image: %s
    command: [sh, -c, "env | grep -E '^(NVIDIA_VISIBLE_DEVICES|CUDA_)' | sort; sleep 3600"]
    resources: {limits: {%s}}
`, name, extraMeta, extraSpec, image, limits)
	}
	onTarget := "  nodeSelector: {kubernetes.io/hostname: " + target + "}\n"

	t.Run("pinned and opted-out pods never get a GPU, and no victim fails", func(t *testing.T) {
		// Admission refuses these pods first (vgpud-scheduled-only, for
		// nodes without NRI); take that policy away, as an admin, to
		// show the runtime hook alone holds.
		binding, err := e.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, "vgpud-scheduled-only", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			binding.ResourceVersion = ""
			if _, err := e.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(context.Background(), binding, metav1.CreateOptions{}); err != nil {
				t.Errorf("restore the vgpud-scheduled-only binding: %v", err)
			}
		})
		// The policy's removal reaches the apiserver's admission a moment later.
		harness.Eventually(t, 30*time.Second, "a pinned vGPU pod admitted", func() error {
			out, err := asTenant(pod("probe", "vgpud.local/busybox:1", "  labels: {vgpud.io/webhook: ignore}\n", "  nodeName: "+target+"\n", `nvidia.com/gpu: "1"`), "create", "--dry-run=server", "-f", "-")
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		const n = 3
		var victims, attackers []string
		for i := range 2 * n {
			v := fmt.Sprintf("victim-%d", i)
			if out, err := asTenant(pod(v, "vgpud.local/busybox:1", "", onTarget, fmt.Sprintf(`nvidia.com/gpu: "1", nvidia.com/gpumem: "%d"`, 1000+i)), "apply", "-f", "-"); err != nil {
				t.Fatalf("%s: %v %s", v, err, out)
			}
			victims = append(victims, v)
			a := fmt.Sprintf("attacker-%d", i)
			// Half by the default scheduler (opted out of the webhook), half by nodeName.
			spec := "  schedulerName: default-scheduler\n" + onTarget
			if i >= n {
				spec = "  nodeName: " + target + "\n"
			}
			if out, err := asTenant(pod(a, "vgpud.local/busybox:1", "  labels: {vgpud.io/webhook: ignore}\n", spec, `nvidia.com/gpu: "1"`), "apply", "-f", "-"); err != nil {
				t.Fatalf("%s: %v %s", a, err, out)
			}
			attackers = append(attackers, a)
		}
		e.waitRunning(t, ns, victims, 120*time.Second)
		for i, v := range victims {
			env := e.containerEnv(t, ns, v)
			p, err := e.kube.CoreV1().Pods(ns).Get(ctx, v, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("%dm", 1000+i)
			if env["NVIDIA_VISIBLE_DEVICES"] != a.Containers[0].GPUs[0].UUID || env["CUDA_DEVICE_MEMORY_LIMIT_0"] != want {
				t.Errorf("%s sees %v, assigned %s with %s", v, env, a.Containers[0].GPUs[0].UUID, want)
			}
		}
		harness.Eventually(t, 60*time.Second, "every attacker refused by the runtime hook", func() error {
			for _, a := range attackers {
				p, err := e.kube.CoreV1().Pods(ns).Get(ctx, a, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if p.Status.Phase == corev1.PodRunning {
					t.Fatalf("%s, which vgpud never placed, runs on %s", a, p.Spec.NodeName)
				}
				if msg := waitingMessage(p); !strings.Contains(msg, "vgpud assigned it no GPUs") {
					return fmt.Errorf("%s: phase %s, %q", a, p.Status.Phase, msg)
				}
			}
			return nil
		})
		p, _ := e.kube.CoreV1().Pods(ns).Get(ctx, attackers[0], metav1.GetOptions{})
		t.Logf("%d attackers on %s: none runs; e.g. %s", len(attackers), target, waitingMessage(p))
		// The victims still run, on their own slices.
		e.waitRunning(t, ns, victims, 10*time.Second)
		for _, name := range append(victims, attackers...) {
			_ = e.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
	})

	t.Run("the pod's env and the image never widen a slice", func(t *testing.T) {
		e.withoutSliceEnvPolicy(t, asTenant)
		cm := `apiVersion: v1
kind: ConfigMap
metadata: {name: wide}
data: {CUDA_DEVICE_MEMORY_LIMIT_0: "40000m", CUDA_DEVICE_SM_LIMIT: "100"}
`
		if out, err := asTenant(cm, "apply", "-f", "-"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		// A CUDA image (NVIDIA_VISIBLE_DEVICES=all in its config), env
		// and envFrom widening the memory and cores.
		widen := `  containers:
  - name: main
    image: vgpud.local/cuda-like:1
    command: [sh, -c, "env | grep -E '^(NVIDIA_VISIBLE_DEVICES|CUDA_)' | sort; sleep 3600"]
    env: [{name: CUDA_DEVICE_MEMORY_LIMIT_0, value: "99999m"}]
    envFrom: [{configMapRef: {name: wide}}]
    resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "1500", nvidia.com/gpucores: "20"}}
`
		if out, err := asTenant("apiVersion: v1\nkind: Pod\nmetadata: {name: widen}\nspec:\n"+widen, "apply", "-f", "-"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		e.waitRunning(t, ns, []string{"widen"}, 60*time.Second)
		env := e.containerEnv(t, ns, "widen")
		p, _ := e.kube.CoreV1().Pods(ns).Get(ctx, "widen", metav1.GetOptions{})
		a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
		if err != nil {
			t.Fatal(err)
		}
		if env["NVIDIA_VISIBLE_DEVICES"] != a.Containers[0].GPUs[0].UUID || env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1500m" || env["CUDA_DEVICE_SM_LIMIT"] != "20" {
			t.Errorf("widen sees %v; assigned %+v", env, a.Containers[0].GPUs)
		}
		t.Logf("image all + env 99999m + envFrom 40000m/100 -> the container sees %v", env)
		// A name set twice (the image's and the pod's) is one NRI
		// cannot replace: refused, saying which to remove.
		twice := pod("twice", "vgpud.local/cuda-like:1", "", "", `nvidia.com/gpu: "1", nvidia.com/gpumem: "1000"`)
		twice = strings.Replace(twice, "    resources:", "    env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]\n    resources:", 1)
		if out, err := asTenant(twice, "apply", "-f", "-"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		e.refusedByHook(t, ns, "twice", 60*time.Second, "sets NVIDIA_VISIBLE_DEVICES in its own env")
		// Through the side door: a name the slice owns but does not set,
		// from a ConfigMap admission cannot read (HAMi's core policy
		// "disable" would lift the container's gpucores).
		side := `apiVersion: v1
kind: ConfigMap
metadata: {name: side}
data: {GPU_CORE_UTILIZATION_POLICY: disable}
`
		if out, err := asTenant(side, "apply", "-f", "-"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		door := pod("side-door", "vgpud.local/busybox:1", "", "", `nvidia.com/gpu: "1", nvidia.com/gpumem: "1000"`)
		door = strings.Replace(door, "    resources:", "    envFrom: [{configMapRef: {name: side}}]\n    resources:", 1)
		if out, err := asTenant(door, "apply", "-f", "-"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		e.refusedByHook(t, ns, "side-door", 60*time.Second, "sets GPU_CORE_UTILIZATION_POLICY in its own env")
	})

	t.Run("without a booking the image or env reaches no GPU", func(t *testing.T) {
		e.withoutSliceEnvPolicy(t, asTenant)
		image := pod("image-all", "vgpud.local/cuda-like:1", "", onTarget, "")
		env := strings.Replace(pod("env-all", "vgpud.local/busybox:1", "", onTarget, ""), "    resources:", "    env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]\n    resources:", 1)
		for _, y := range []string{image, env} {
			if out, err := asTenant(strings.Replace(y, "    resources: {limits: {}}\n", "", 1), "apply", "-f", "-"); err != nil {
				t.Fatalf("%v %s", err, out)
			}
		}
		e.waitRunning(t, ns, []string{"image-all", "env-all"}, 60*time.Second)
		for _, name := range []string{"image-all", "env-all"} {
			if got := e.containerEnv(t, ns, name)["NVIDIA_VISIBLE_DEVICES"]; got != "void" {
				t.Errorf("%s sees NVIDIA_VISIBLE_DEVICES=%q, want void", name, got)
			}
		}
	})

	t.Run("with the hook stopped no GPU container starts", func(t *testing.T) {
		hookStopped(t, e, ns, nodes)
	})

	t.Run("the hook's latency", func(t *testing.T) {
		for _, n := range nodes {
			var vp *corev1.Pod
			harness.Eventually(t, 60*time.Second, "vgpud on "+n, func() (err error) {
				vp, err = e.vgpudPod(n)
				return err
			})
			raw, err := e.scrape(vp)
			if err != nil {
				t.Fatalf("%s metrics: %v", vp.Name, err)
			}
			p99, count, err := harness.HistogramQuantile(strings.NewReader(string(raw)), "vgpud_node_runtime_hook_seconds", 0.99)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("node %s: NRI hook p99 <= %.2f ms over %d containers (target 5 ms)", n, p99*1000, count)
		}
	})
}

// hookStopped stops vgpud on one node (its DaemonSet label taken away)
// while a GPU pod there restarts its container: the runtime's NRI
// validator creates none without vgpud's hook, and once vgpud is back
// the container runs again with its slice. Meanwhile pods that could
// reach no GPU start there, and a privileged one does not.
func hookStopped(t *testing.T, e env, ns string, nodes []string) {
	ctx := context.Background()
	leader, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	off := nodes[0]
	if off == leader.Spec.NodeName && len(nodes) > 1 {
		off = nodes[1]
	}
	p := gpuPod("restarts", map[string]string{"nvidia.com/gpumem": "1200"}, nil)
	p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": off}
	// Print the env, then exit: kubelet creates the container again and again.
	p.Spec.Containers[0].Command = []string{"sh", "-c", "env | grep -E '^(NVIDIA_VISIBLE_DEVICES|CUDA_)' | sort; sleep 5; exit 1"}
	p.Spec.RestartPolicy = corev1.RestartPolicyAlways
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, ns, []string{"restarts"}, 60*time.Second)
	putBack := e.takeGPULabel(t, off)
	harness.Eventually(t, 90*time.Second, "vgpud gone from "+off, func() error {
		if vp, err := e.vgpudPod(off); err == nil {
			return fmt.Errorf("%s still there", vp.Name)
		}
		return nil
	})
	var refused string
	harness.Eventually(t, 120*time.Second, "the restarting container refused by containerd's NRI validator", func() error {
		got, err := e.kube.CoreV1().Pods(ns).Get(ctx, "restarts", metav1.GetOptions{})
		if err != nil {
			return err
		}
		refused = waitingMessage(got)
		return harness.Contains(refused, `required plugin "vgpud" not present`)
	})
	t.Logf("hook stopped on %s: %s", off, refused)

	// A vgpud outage stops only what could reach a GPU. On the node
	// without vgpud: a tenant's CPU pod and a pod of the pod network's
	// kind (privileged, host network, kube-system) start; a privileged
	// pod in a namespace that allows one is marked at admission and its
	// container refused, as the GPU pod's above.
	outage := "e2e-outage"
	e.namespace(t, outage, map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})
	pinned := func(ns, name string, privileged, hostNetwork bool) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": off}, HostNetwork: hostNetwork,
				TerminationGracePeriodSeconds: ptr.To(int64(0)),
				Containers: []corev1.Container{{Name: "c", Image: "vgpud.local/busybox:1", Command: []string{"sleep", "infinity"},
					SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(privileged)}}}},
		}
	}
	cpu, network, priv := pinned(outage, "cpu", false, false), pinned("kube-system", "e2e-pod-network-like", true, true), pinned(outage, "privileged", true, false)
	for _, p := range []*corev1.Pod{cpu, network, priv} {
		if _, err := e.kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
	t.Cleanup(func() {
		_ = e.kube.CoreV1().Pods("kube-system").Delete(context.Background(), network.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	})
	started := time.Now()
	e.waitRunning(t, outage, []string{"cpu"}, 60*time.Second)
	e.waitRunning(t, "kube-system", []string{network.Name}, 60*time.Second)
	t.Logf("vgpud down on %s: a CPU pod and a privileged host-network pod in kube-system run (%v)", off, time.Since(started).Round(time.Millisecond))
	got, err := e.kube.CoreV1().Pods(outage).Get(ctx, "privileged", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !podmodel.RequiresHook(got.Annotations) {
		t.Fatalf("the privileged pod is not marked as requiring vgpud's hook: %v", got.Annotations)
	}
	harness.Eventually(t, 60*time.Second, "the privileged pod refused by containerd's NRI validator", func() error {
		got, err := e.kube.CoreV1().Pods(outage).Get(ctx, "privileged", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Status.Phase == corev1.PodRunning {
			t.Fatalf("the privileged pod runs on %s while vgpud is down there", off)
		}
		return harness.Contains(waitingMessage(got), `required plugin "vgpud" not present`)
	})
	t.Logf("vgpud down on %s: the privileged pod, marked %s=%s, is refused its container", off, wellknown.AnnotationRequiredPlugins, got.Annotations[wellknown.AnnotationRequiredPlugins])
	putBack()
	back := time.Now()
	harness.Eventually(t, 90*time.Second, "vgpud back on "+off, func() error {
		_, err := e.vgpudPod(off)
		return err
	})
	// kubelet retries the container with its back-off; it then runs
	// with its slice.
	harness.Eventually(t, 180*time.Second, "the container running again with its slice", func() error {
		got, err := e.kube.CoreV1().Pods(ns).Get(ctx, "restarts", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cs := range got.Status.ContainerStatuses {
			if cs.State.Running != nil && cs.State.Running.StartedAt.After(back) {
				return nil
			}
		}
		return fmt.Errorf("not started since vgpud came back: %s", waitingMessage(got))
	})
	env := e.containerEnv(t, ns, "restarts")
	if env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1200m" || !strings.HasPrefix(env["NVIDIA_VISIBLE_DEVICES"], "GPU-") {
		t.Errorf("after vgpud came back the container sees %v", env)
	}
	e.waitRunning(t, outage, []string{"privileged"}, 180*time.Second)
	t.Logf("vgpud back on %s: the privileged pod runs", off)
}

// waitingMessage is why the pod's first container waits, if it does.
// refusedByHook waits until pod's container is refused at creation with
// a message holding every want, and fails at once if it runs instead.
// It returns the message.
func (e env) refusedByHook(t *testing.T, ns, pod string, within time.Duration, want ...string) string {
	t.Helper()
	var msg string
	harness.Eventually(t, within, pod+" refused by the runtime hook", func() error {
		p, err := e.kube.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase == corev1.PodRunning {
			t.Fatalf("%s runs with %v", pod, e.containerEnv(t, ns, pod))
		}
		msg = waitingMessage(p)
		return harness.Contains(msg, want...)
	})
	return msg
}

func waitingMessage(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			return w.Reason + ": " + w.Message
		}
	}
	return ""
}

// withoutSliceEnvPolicy takes the vgpud-slice-env policy's binding away
// for the rest of t, as an admin, to show the runtime hook alone holds
// against a pod's env (admission refuses it first: fences_test.go).
func (e env) withoutSliceEnvPolicy(t *testing.T, asTenant func(stdin string, args ...string) (string, error)) {
	t.Helper()
	ctx := context.Background()
	bindings := e.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	binding, err := bindings.Get(ctx, "vgpud-slice-env", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bindings.Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		binding.ResourceVersion = ""
		if _, err := bindings.Create(context.Background(), binding, metav1.CreateOptions{}); err != nil {
			t.Errorf("restore the vgpud-slice-env binding: %v", err)
		}
	})
	probe := "apiVersion: v1\nkind: Pod\nmetadata: {name: env-probe}\nspec:\n  containers:\n  - {name: main, image: vgpud.local/busybox:1, env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]}\n"
	harness.Eventually(t, 30*time.Second, "a pod with slice env admitted", func() error {
		if out, err := asTenant(probe, "create", "--dry-run=server", "-f", "-"); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}
