package webhook

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
)

// A raw object can hold what Go's encoding would write differently: fields
// this client-go does not know, quantities in non-canonical form. The patch
// must leave them alone and carry only the change.
func TestPodPatchTouchesOnlyTheChange(t *testing.T) {
	raw := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","futureField":{"a":1}},
		"spec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"nvidia.com/gpumem":"4000"}}}],"futureSpec":true}}`)
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		t.Fatal(err)
	}
	original := pod.DeepCopy()
	pod.Spec.SchedulerName = "vgpud-scheduler"
	resp, err := patchResponse(podPatch("", original, &pod))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"op":"add","path":"/spec/schedulerName","value":"vgpud-scheduler"}]`
	if string(resp.Patch) != want {
		t.Fatalf("patch %s, want %s", resp.Patch, want)
	}
	_, patched := applyPatch(t, raw, resp)
	var m map[string]any
	if err := json.Unmarshal(patched, &m); err != nil {
		t.Fatal(err)
	}
	if m["metadata"].(map[string]any)["futureField"] == nil || m["spec"].(map[string]any)["futureSpec"] != true {
		t.Fatalf("unknown fields lost: %s", patched)
	}
}

func TestPodPatchNoChange(t *testing.T) {
	raw := []byte(`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}`)
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		t.Fatal(err)
	}
	resp, err := patchResponse(podPatch("", pod.DeepCopy(), &pod))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Allowed || resp.Patch != nil || resp.PatchType != nil {
		t.Fatalf("unchanged pod: %+v", resp)
	}
}

// The patch is built from what the webhook changed, not by diffing the
// whole pod: a pod with 90 000 env entries gets one op per change, and
// applying it yields the mutated pod.
func TestPodPatchOfAHugePodIsItsChanges(t *testing.T) {
	env := make([]corev1.EnvVar, 90000)
	for i := range env {
		env[i] = corev1.EnvVar{Name: fmt.Sprintf("E%d", i), Value: "x"}
	}
	env[42].Name = EnvCorePolicy
	pod := corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init"}},
		Containers: []corev1.Container{{Name: "c", Env: env, Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpumem": resource.MustParse("1000")}}}},
	}}
	raw, err := json.Marshal(&pod)
	if err != nil {
		t.Fatal(err)
	}
	original := pod.DeepCopy()
	cfg := testConfig()
	cfg.CorePolicy = CorePolicyForce
	if v := newPods(cfg, nil).Decide(&pod); v.Deny != "" || v.Skip != "" {
		t.Fatalf("verdict %+v", v)
	}
	setEnv(&pod.Spec.InitContainers[0], "ADDED", "1")
	ops := podPatch("", original, &pod)
	var paths []string
	for _, op := range ops {
		paths = append(paths, op.Operation+" "+op.Path)
	}
	want := "add /metadata, add /spec/schedulerName, add /spec/initContainers/0/env, add /spec/containers/0/resources/limits, add /spec/containers/0/resources/requests, replace /spec/containers/0/env/42"
	if got := strings.Join(paths, ", "); got != want {
		t.Fatalf("ops %s\nwant %s", got, want)
	}
	resp, err := patchResponse(ops)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := applyPatch(t, raw, resp)
	if !apiequality.Semantic.DeepEqual(got, &pod) {
		t.Fatal("the patched pod is not the mutated pod")
	}
}
