package webhook

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A raw object can hold what Go's encoding would write differently: fields
// this client-go does not know, quantities in non-canonical form. The patch
// must leave them alone and carry only the change.
func TestPatchResponseTouchesOnlyTheChange(t *testing.T) {
	raw := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","futureField":{"a":1}},
		"spec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"nvidia.com/gpumem":"4000"}}}],"futureSpec":true}}`)
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		t.Fatal(err)
	}
	original := pod.DeepCopy()
	pod.Spec.SchedulerName = "vgpud-scheduler"
	resp, err := patchResponse(raw, original, &pod)
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

func TestPatchResponseNoChange(t *testing.T) {
	raw := []byte(`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}`)
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		t.Fatal(err)
	}
	resp, err := patchResponse(raw, pod.DeepCopy(), &pod)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Allowed || resp.Patch != nil || resp.PatchType != nil {
		t.Fatalf("unchanged pod: %+v", resp)
	}
}

func TestPatchResponseBadRaw(t *testing.T) {
	if _, err := patchResponse([]byte("{"), map[string]int{}, map[string]int{"a": 1}); err == nil {
		t.Fatal("unparseable raw object: want an error")
	}
}
