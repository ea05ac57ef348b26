//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vgpud/vgpud/manifests"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
	"github.com/vgpud/vgpud/webhook"
)

// TestGPUPodsPolicyInTheAPIServer applies the manifest's vgpud-gpu-pods
// policy, with no webhook configured, and creates in dry run pods of
// every shape the policy completes, and two it only evaluates:
// kube-apiserver itself evaluates its one mutation (a type error there
// would refuse every GPU pod, the policy failing closed). Each pod must
// come back with what the webhook would have added to it, and no more,
// in limits and in requests.
func TestGPUPodsPolicyInTheAPIServer(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	adm := e.kube.AdmissionregistrationV1()
	_ = adm.MutatingWebhookConfigurations().Delete(ctx, "vgpud", metav1.DeleteOptions{})
	policy, binding, err := manifests.GPUPodsPolicy()
	if err != nil {
		t.Fatal(err)
	}
	const space = "policy-shapes"
	harness.EnsureNamespace(t, e.kube, space, nil)
	pods := e.kube.CoreV1().Pods(space)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	// A policy is in force while a pod that gives only memory gets a GPU
	// count. An earlier test's policy of the same name goes first, and
	// out of force, so that what answers below is this one.
	inForce := func(want bool) func() error {
		return func() error {
			p, err := pods.Create(ctx, gpuPod("probe", map[string]string{"nvidia.com/gpumem": "1000"}), dryRun)
			if err != nil {
				return err
			}
			if _, ok := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; ok != want {
				return fmt.Errorf("a GPU count added: %v, want %v", ok, want)
			}
			return nil
		}
	}
	_ = adm.MutatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
	_ = adm.MutatingAdmissionPolicies().Delete(ctx, policy.Name, metav1.DeleteOptions{})
	harness.Eventually(t, 30*time.Second, "no vgpud-gpu-pods policy in force", inForce(false))
	if _, err := adm.MutatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.MutatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the vgpud-gpu-pods policy in force", inForce(true))

	res := func(kv ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return l
	}
	ctr := func(name string, limits, requests corev1.ResourceList) corev1.Container {
		return corev1.Container{Name: name, Image: "busybox", Resources: corev1.ResourceRequirements{Limits: limits, Requests: requests}}
	}
	shapes := map[string]corev1.PodSpec{
		"memory":           {Containers: []corev1.Container{ctr("c", res("nvidia.com/gpumem", "1000"), nil)}},
		"count":            {Containers: []corev1.Container{ctr("c", res("nvidia.com/gpu", "1"), nil)}},
		"requests-only":    {Containers: []corev1.Container{ctr("c", nil, res("nvidia.com/gpucores", "30", "nvidia.com/gpumem", "2000"))}},
		"count-and-memory": {Containers: []corev1.Container{ctr("d", res("nvidia.com/gpu", "2", "nvidia.com/gpumem", "300"), res("nvidia.com/gpu", "2"))}},
		"percent":          {Containers: []corev1.Container{ctr("plain", res("cpu", "1"), nil), ctr("half", res("nvidia.com/gpumem-percentage", "50"), nil), ctr("whole", res("nvidia.com/gpumem-percentage", "100"), nil)}},
		"init-only":        {InitContainers: []corev1.Container{ctr("i", nil, res("nvidia.com/gpumem", "500"))}, Containers: []corev1.Container{ctr("plain", nil, nil)}},
		"init-and-app":     {InitContainers: []corev1.Container{ctr("i", res("nvidia.com/gpu", "2"), nil), ctr("j", nil, nil)}, Containers: []corev1.Container{ctr("g", res("nvidia.com/gpucores", "20"), nil)}},
		"requested-whole":  {Containers: []corev1.Container{ctr("c", nil, res("nvidia.com/gpumem-percentage", "100", "nvidia.com/gpu", "3"))}},
		"sidecar": {InitContainers: []corev1.Container{func() corev1.Container {
			c := ctr("side", res("nvidia.com/gpumem", "700"), nil)
			c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
			return c
		}()}, Containers: []corev1.Container{ctr("main", res("nvidia.com/gpu", "1"), nil)}},
	}
	// Shapes the webhook refuses or leaves alone, which the policy still
	// evaluates (its match takes them): admitted with the policy alone,
	// no error from its expressions; the webhook and the policies after
	// it judge them.
	evaluated := map[string]corev1.PodSpec{
		"count-zero": {Containers: []corev1.Container{ctr("c", res("nvidia.com/gpu", "0", "nvidia.com/gpucores", "5"), nil)}},
		"mig":        {Containers: []corev1.Container{ctr("c", res("nvidia.com/mig-1g.10gb", "1"), nil)}},
	}
	for shape, spec := range evaluated {
		got, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: shape}, Spec: spec}, dryRun)
		if err != nil {
			t.Errorf("%s: the apiserver refused the pod with the policy alone: %v", shape, err)
		} else if got.Spec.SchedulerName != "vgpud-scheduler" {
			t.Errorf("%s: schedulerName %q after the policy, want vgpud-scheduler", shape, got.Spec.SchedulerName)
		}
	}
	names := wellknown.DefaultResourceNames()
	decider := webhook.NewPods(webhook.DefaultConfig(), "vgpud-scheduler", names, nil)
	for shape, spec := range shapes {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: shape}, Spec: spec}
		got, err := pods.Create(ctx, pod.DeepCopy(), dryRun)
		if err != nil {
			t.Errorf("%s: the apiserver refused the pod with the policy alone: %v", shape, err)
			continue
		}
		if got.Spec.SchedulerName != "vgpud-scheduler" {
			t.Errorf("%s: schedulerName %q after the policy, want vgpud-scheduler", shape, got.Spec.SchedulerName)
		}
		// What the webhook makes of the pod as the apiserver hands it
		// over: requests defaulted from limits.
		want := pod.DeepCopy()
		want.Namespace = space
		for _, cs := range [][]corev1.Container{want.Spec.InitContainers, want.Spec.Containers} {
			for i := range cs {
				for k, q := range cs[i].Resources.Limits {
					if _, ok := cs[i].Resources.Requests[k]; !ok {
						if cs[i].Resources.Requests == nil {
							cs[i].Resources.Requests = corev1.ResourceList{}
						}
						cs[i].Resources.Requests[k] = q
					}
				}
			}
		}
		if v := decider.Decide(want); v.Deny != "" || v.Skip != "" {
			t.Fatalf("%s: the webhook would not patch it (%q %q): pick a shape it completes", shape, v.Deny, v.Skip)
		}
		for _, pair := range [][2][]corev1.Container{{got.Spec.InitContainers, want.Spec.InitContainers}, {got.Spec.Containers, want.Spec.Containers}} {
			if len(pair[0]) != len(pair[1]) {
				t.Errorf("%s: the policy left %d containers of a kind where the pod had %d", shape, len(pair[0]), len(pair[1]))
				continue
			}
			for i, c := range pair[1] {
				g := pair[0][i]
				if g.Name != c.Name {
					t.Errorf("%s: container %d is %q after the policy, %q before", shape, i, g.Name, c.Name)
					continue
				}
				for _, r := range names.All() {
					for which, lists := range map[string][2]corev1.ResourceList{"limits": {g.Resources.Limits, c.Resources.Limits}, "requests": {g.Resources.Requests, c.Resources.Requests}} {
						have, hasHave := lists[0][corev1.ResourceName(r)]
						need, hasNeed := lists[1][corev1.ResourceName(r)]
						if hasHave != hasNeed || (hasNeed && have.Cmp(need) != 0) {
							t.Errorf("%s: container %s %s %s: the policy gives %v (%v), the webhook %v (%v)", shape, c.Name, which, r, have.String(), hasHave, need.String(), hasNeed)
						}
					}
				}
			}
		}
	}
	keys := make([]string, 0, len(shapes))
	for k := range shapes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	t.Logf("compared %d shapes: %v", len(keys), keys)
}
