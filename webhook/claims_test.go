package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	drcel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// recordedTemplates keeps what Ensure was asked, and fails with err.
type recordedTemplates struct {
	made map[string]*resourceapi.ResourceClaimTemplate
	err  error
}

func (r *recordedTemplates) Ensure(_ context.Context, ns string, t *resourceapi.ResourceClaimTemplate) error {
	if r.err != nil {
		return r.err
	}
	if r.made == nil {
		r.made = map[string]*resourceapi.ResourceClaimTemplate{}
	}
	r.made[ns+"/"+t.Name] = t
	return nil
}

type gpuContainer struct {
	name      string
	resources map[string]string
}

// claimReview is a pod CREATE in namespace "ml", as the apiserver sends
// it after the vgpud-gpu-pods policy completed it.
func claimReview(t *testing.T, annotations map[string]string, containers ...gpuContainer) *admissionv1.AdmissionRequest {
	t.Helper()
	pod := corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml", Annotations: annotations},
		Spec: corev1.PodSpec{SchedulerName: "vgpud-scheduler"}}
	for _, c := range containers {
		l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		for k, v := range c.resources {
			l[corev1.ResourceName(k)] = resource.MustParse(v)
		}
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c.name, Image: "cuda", Resources: corev1.ResourceRequirements{Limits: l, Requests: l.DeepCopy()}})
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{UID: "1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: "ml", Name: "train",
		Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}
}

// A pod written for vgpud or HAMi becomes claims from templates of its
// containers' shapes: the vGPU resources go, the rest stays, and
// kube-scheduler's default profile places it.
func TestClaimPodsConvert(t *testing.T) {
	rec := &recordedTemplates{}
	h := NewClaimPods(newPods(testConfig(), nil), rec)
	req := claimReview(t, nil,
		gpuContainer{"a", map[string]string{"nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}},
		gpuContainer{"b", map[string]string{"nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}},
		gpuContainer{"cpu", nil},
		gpuContainer{"whole", map[string]string{"nvidia.com/gpu": "1"}})
	resp := h.Handle(context.Background(), req)
	if !resp.Allowed {
		t.Fatalf("denied: %v", resp.Result)
	}
	pod, _ := applyPatch(t, req.Object.Raw, resp)
	if pod.Spec.SchedulerName != "default-scheduler" {
		t.Errorf("scheduler %q; want default-scheduler", pod.Spec.SchedulerName)
	}
	var claims []string
	for _, c := range pod.Spec.ResourceClaims {
		claims = append(claims, c.Name+"="+*c.ResourceClaimTemplateName)
	}
	if len(claims) != 3 || len(rec.made) != 2 {
		t.Fatalf("pod claims %v, templates %v; want 3 claims of 2 templates", claims, rec.made)
	}
	for i, c := range pod.Spec.Containers {
		for n := range c.Resources.Limits {
			if strings.HasPrefix(string(n), "nvidia.com/") {
				t.Errorf("container %s keeps %s", c.Name, n)
			}
		}
		if _, ok := c.Resources.Limits[corev1.ResourceCPU]; !ok {
			t.Errorf("container %s lost its CPU", c.Name)
		}
		want := map[int]string{0: "vgpud-gpu-0", 1: "vgpud-gpu-1", 3: "vgpud-gpu-2"}[i]
		if got := fmt.Sprint(c.Resources.Claims); (want == "" && len(c.Resources.Claims) != 0) || (want != "" && got != "[{"+want+" }]") {
			t.Errorf("container %s claims %s; want %q", c.Name, got, want)
		}
	}
	if *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName != *pod.Spec.ResourceClaims[1].ResourceClaimTemplateName {
		t.Errorf("two containers of one shape got two templates: %v", claims)
	}
	shared := rec.made["ml/"+*pod.Spec.ResourceClaims[0].ResourceClaimTemplateName]
	whole := rec.made["ml/"+*pod.Spec.ResourceClaims[2].ResourceClaimTemplateName]
	if got := requestOf(shared); got != "vgpud-gpu x1 memory=3000Mi cores=30" {
		t.Errorf("shared template %s", got)
	}
	// A whole card, as the extender gives it: every core, the cluster's
	// default memory.
	if got := requestOf(whole); got != "vgpud-gpu x1 cores=100" {
		t.Errorf("whole template %s", got)
	}
	if shared.Labels[wellknown.LabelManagedBy] != wellknown.ManagedByVgpud || !strings.HasPrefix(shared.Name, wellknown.ClaimTemplatePrefix) {
		t.Errorf("template meta %+v", shared.ObjectMeta)
	}
}

func requestOf(t *resourceapi.ResourceClaimTemplate) string {
	if t == nil || len(t.Spec.Spec.Devices.Requests) != 1 {
		return fmt.Sprint(t)
	}
	r := t.Spec.Spec.Devices.Requests[0].Exactly
	s := fmt.Sprintf("%s x%d", r.DeviceClassName, r.Count)
	if r.Capacity != nil {
		for _, k := range []resourceapi.QualifiedName{dradevices.CapacityMemory, dradevices.CapacityCores} {
			if q, ok := r.Capacity.Requests[k]; ok {
				s += fmt.Sprintf(" %s=%s", k, q.String())
			}
		}
	}
	return s
}

// Several GPUs stay apart (and on one NUMA node where numa-bind says
// so), and the GPU type and UUID annotations select the devices the
// extender would: checked by evaluating the template's CEL, as
// kube-scheduler does, on the devices a node publishes.
func TestClaimPodsKeepTheSelectors(t *testing.T) {
	rec := &recordedTemplates{}
	a := map[string]string{wellknown.AnnotationNUMABind: "true", wellknown.AnnotationUseGPUType: "a100, H100", wellknown.AnnotationNoUseGPUUUID: "GPU-B", wellknown.AnnotationGPUPolicy: "spread"}
	req := claimReview(t, a, gpuContainer{"main", map[string]string{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1024"}})
	resp := NewClaimPods(newPods(testConfig(), nil), rec).Handle(context.Background(), req)
	if !resp.Allowed || len(rec.made) != 1 {
		t.Fatalf("%v, %d templates", resp.Result, len(rec.made))
	}
	if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "vgpud.io/gpu-policy is not read") {
		t.Errorf("warnings %v; want the policy's", resp.Warnings)
	}
	var tmpl *resourceapi.ResourceClaimTemplate
	for _, v := range rec.made {
		tmpl = v
	}
	spec := tmpl.Spec.Spec.Devices
	if len(spec.Constraints) != 2 || *spec.Constraints[0].DistinctAttribute != "gpu.vgpud.io/uuid" || *spec.Constraints[1].MatchAttribute != "gpu.vgpud.io/numaNode" {
		t.Errorf("constraints %+v", spec.Constraints)
	}
	inv := protocol.Inventory{}
	for i, g := range []struct{ uuid, model string }{{"GPU-A", "NVIDIA A100-SXM4-40GB"}, {"GPU-B", "NVIDIA A100-SXM4-40GB"}, {"GPU-C", "NVIDIA H100 80GB HBM3"}, {"GPU-D", "Tesla T4"}} {
		inv.GPUs = append(inv.GPUs, protocol.GPU{UUID: g.uuid, Index: i, Model: g.model, MemoryMiB: 40960, Cores: 100, Split: 4, Healthy: true})
	}
	compiler := drcel.GetCompiler(drcel.Features{EnableConsumableCapacity: true})
	var matched []string
	for _, d := range dradevices.Devices(inv, dradevices.ClaimDefaults{MemPercent: 100}, dradevices.Marks{}) {
		all := true
		for _, s := range spec.Requests[0].Exactly.Selectors {
			r := compiler.CompileCELExpression(s.CEL.Expression, drcel.Options{})
			if r.Error != nil {
				t.Fatalf("%s: %v", s.CEL.Expression, r.Error)
			}
			ok, _, err := r.DeviceMatches(context.Background(), drcel.Device{Driver: wellknown.DRADriver, Attributes: d.Attributes, Capacity: d.Capacity})
			if err != nil {
				t.Fatal(err)
			}
			all = all && ok
		}
		if all {
			matched = append(matched, d.Name)
		}
	}
	if want := fmt.Sprint([]string{dradevices.DeviceName("GPU-A"), dradevices.DeviceName("GPU-C")}); fmt.Sprint(matched) != want {
		t.Errorf("selectors %v match %v; want the A100 but GPU-B, and the H100", spec.Requests[0].Exactly.Selectors, matched)
	}
}

// What has no claim form is refused at create, saying what to write;
// a dry run makes no template; a template that cannot be made refuses
// the pod rather than admit it unconverted.
func TestClaimPodsRefuse(t *testing.T) {
	for _, c := range []struct {
		name      string
		a         map[string]string
		resources map[string]string
		want      string
	}{
		{"percentage", nil, map[string]string{"nvidia.com/gpumem-percentage": "50"}, "write nvidia.com/gpumem in MiB"},
		{"priority", nil, map[string]string{"nvidia.com/gpumem": "1000", "nvidia.com/priority": "1"}, "nvidia.com/priority"},
		{"mig mode", map[string]string{wellknown.AnnotationGPUMode: "mig"}, map[string]string{"nvidia.com/gpumem": "1000"}, "DeviceClass vgpud-mig"},
		{"mig profile", nil, map[string]string{"nvidia.com/mig-1g.10gb": "1"}, "DeviceClass vgpud-mig"},
	} {
		rec := &recordedTemplates{}
		resp := NewClaimPods(newPods(testConfig(), nil), rec).Handle(context.Background(), claimReview(t, c.a, gpuContainer{"main", c.resources}))
		if resp.Allowed || !strings.Contains(resp.Result.Message, c.want) || len(rec.made) != 0 {
			t.Errorf("%s: allowed=%v %q, %d templates; want refused naming %q", c.name, resp.Allowed, resp.Result.Message, len(rec.made), c.want)
		}
	}

	rec := &recordedTemplates{}
	req := claimReview(t, nil, gpuContainer{"main", map[string]string{"nvidia.com/gpumem": "1000"}})
	req.DryRun = ptr.To(true)
	if resp := NewClaimPods(newPods(testConfig(), nil), rec).Handle(context.Background(), req); !resp.Allowed || len(rec.made) != 0 {
		t.Errorf("dry run: allowed=%v, %d templates made", resp.Allowed, len(rec.made))
	}
	rec.err = errors.New("resourceclaimtemplates is forbidden")
	req.DryRun = nil
	if resp := NewClaimPods(newPods(testConfig(), nil), rec).Handle(context.Background(), req); resp.Allowed || !strings.Contains(resp.Result.Message, "forbidden") {
		t.Errorf("template not made: allowed=%v %v", resp.Allowed, resp.Result)
	}

	// Quota is checked on the ask as written, before conversion.
	q := quotas{"ml": {Memory: podmodel.Limit{Set: true, Hard: 500}}}
	if resp := NewClaimPods(newPods(testConfig(), q), &recordedTemplates{}).Handle(context.Background(), req); resp.Allowed || !strings.Contains(resp.Result.Message, "quota") {
		t.Errorf("over quota: allowed=%v %v", resp.Allowed, resp.Result)
	}
	// Annotations the extender takes may make a selector past what a
	// claim takes: refused saying so, not by the apiserver's 422.
	long := strings.TrimSuffix(strings.Repeat(strings.Repeat(`"`, 60)+",", 64), ",")
	if resp := NewClaimPods(newPods(testConfig(), nil), &recordedTemplates{}).Handle(context.Background(), claimReview(t, map[string]string{wellknown.AnnotationUseGPUType: long},
		gpuContainer{"main", map[string]string{"nvidia.com/gpumem": "1000"}})); resp.Allowed || !strings.Contains(resp.Result.Message, "name fewer types or UUIDs") {
		t.Errorf("a selector past 10 KiB: allowed=%v %v", resp.Allowed, resp.Result)
	}
	// A pod that asks for no GPU is left alone.
	if resp := NewClaimPods(newPods(testConfig(), nil), &recordedTemplates{}).Handle(context.Background(), claimReview(t, nil, gpuContainer{"cpu", nil})); !resp.Allowed || len(resp.Patch) != 0 {
		t.Errorf("cpu pod: %v %s", resp.Result, resp.Patch)
	}
}
