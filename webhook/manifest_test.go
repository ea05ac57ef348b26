package webhook

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/manifests"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// readWebhookConfig reads the MutatingWebhookConfiguration from the install
// manifest; these tests keep it from drifting away from what the handler
// expects.
func readWebhookConfig(t *testing.T) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	mwc, err := manifests.WebhookConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	return mwc
}

func TestWebhookConfigShape(t *testing.T) {
	mwc := readWebhookConfig(t)
	names := []string{"pods.vgpud.io", "claims.vgpud.io", "resourceclaims.vgpud.io", "jobs.vgpud.io"}
	var got []string
	for _, w := range mwc.Webhooks {
		got = append(got, w.Name)
	}
	if !slices.Equal(got, names) {
		t.Fatalf("webhooks %v; want %v", got, names)
	}
	for i, rule := range []struct{ group, resource, path string }{{"", "pods", "/webhook"}, {"", "pods", "/webhook/claims"}, {"resource.k8s.io", "resourceclaims", "/webhook/resourceclaims"}, {"batch", "jobs", "/webhook"}} {
		checkWebhookShape(t, mwc.Webhooks[i], rule.group, rule.resource, rule.path)
	}
	// A namespace's pods go to one of the two pod webhooks, by its
	// vgpud.io/gpu-claims label, and both take the same pods.
	for i, op := range []string{"NotIn", "In"} {
		b, _ := json.Marshal(mwc.Webhooks[i].NamespaceSelector)
		if want := `{"key":"` + wellknown.LabelGPUClaims + `","operator":"` + op + `","values":["true"]}`; !strings.Contains(string(b), want) {
			t.Errorf("%s: namespaceSelector %s lacks %s", mwc.Webhooks[i].Name, b, want)
		}
	}
	if mwc.Webhooks[0].MatchConditions[0].Expression != mwc.Webhooks[1].MatchConditions[0].Expression {
		t.Error("claims.vgpud.io's matchCondition is not pods.vgpud.io's")
	}
}

func checkWebhookShape(t *testing.T, w admissionregistrationv1.MutatingWebhook, group, resource, path string) {
	t.Helper()
	// Which object and Service: main's TestManifestNamesWhatTheLeaderKeeps.
	svc := w.ClientConfig.Service
	if svc == nil || svc.Namespace != "vgpud-system" || svc.Path == nil || *svc.Path != path || svc.Port == nil || *svc.Port != 443 {
		t.Fatalf("clientConfig.service = %+v", svc)
	}
	if w.ClientConfig.URL != nil || len(w.ClientConfig.CABundle) != 0 {
		t.Fatal("clientConfig must name the Service and leave caBundle to the leader")
	}
	if !slices.Equal(w.AdmissionReviewVersions, []string{"v1", "v1beta1"}) {
		t.Fatalf("admissionReviewVersions = %v", w.AdmissionReviewVersions)
	}
	// The claims path makes templates, but not on a dry run.
	sideEffects := admissionregistrationv1.SideEffectClassNone
	if path == "/webhook/claims" {
		sideEffects = admissionregistrationv1.SideEffectClassNoneOnDryRun
	}
	// The claims' quota check writes nothing: nothing to do again.
	reinvocation := admissionregistrationv1.IfNeededReinvocationPolicy
	if path == "/webhook/resourceclaims" {
		reinvocation = admissionregistrationv1.NeverReinvocationPolicy
	}
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore ||
		w.SideEffects == nil || *w.SideEffects != sideEffects ||
		w.TimeoutSeconds == nil || *w.TimeoutSeconds != 5 ||
		w.ReinvocationPolicy == nil || *w.ReinvocationPolicy != reinvocation {
		t.Fatalf("policies: failure %v sideEffects %v timeout %v reinvocation %v", w.FailurePolicy, w.SideEffects, w.TimeoutSeconds, w.ReinvocationPolicy)
	}
	if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) ||
		!slices.Equal(w.Rules[0].Resources, []string{resource}) || !slices.Equal(w.Rules[0].APIGroups, []string{group}) {
		t.Fatalf("rules = %+v", w.Rules)
	}
	// An admin's opt-out, by namespace; a pod's own label is a tenant's,
	// and must not keep it from being marked as requiring the hook.
	if w.ObjectSelector != nil && len(w.ObjectSelector.MatchExpressions)+len(w.ObjectSelector.MatchLabels) > 0 {
		t.Errorf("objectSelector %v: a pod's own labels must not skip the webhook", w.ObjectSelector)
	}
	for what, sel := range map[string]any{"namespaceSelector": w.NamespaceSelector} {
		b, _ := json.Marshal(sel)
		for _, label := range []string{wellknown.LabelWebhook, wellknown.LabelWebhookHAMi} {
			want := `{"key":"` + label + `","operator":"NotIn","values":["` + wellknown.WebhookIgnore + `"]}`
			if !strings.Contains(string(b), want) {
				t.Errorf("%s %s lacks %s", what, b, want)
			}
		}
	}
	if len(w.MatchConditions) != 1 {
		t.Fatalf("want one matchCondition, got %d", len(w.MatchConditions))
	}
}

// The matchCondition decides which pods reach the handler; a pod it
// wrongly skips is placed without the webhook's checks and completions,
// or not marked as requiring the runtime hook. It must agree with
// podmodel.ReachesGPU on every pod, and take every pod podmodel.Wants.
func TestWebhookMatchConditionAgreesWithPodWants(t *testing.T) {
	prg := matchCondition(t, 0)
	pods := conditionPods(t)
	names := wellknown.DefaultResourceNames()
	matched := 0
	for name, raw := range pods {
		var obj map[string]any
		var pod corev1.Pod
		if err := json.Unmarshal(raw, &obj); err != nil {
			t.Fatal(err)
		}
		if _, ok := obj["metadata"]; !ok {
			obj["metadata"] = map[string]any{} // as the apiserver sends every pod
		}
		if err := json.Unmarshal(raw, &pod); err != nil {
			t.Fatal(err)
		}
		if len(pod.Spec.Containers) == 0 {
			continue // no container asks for anything; validation rejects it after admission
		}
		out, _, err := prg.Eval(map[string]any{"object": obj})
		if err != nil {
			t.Fatalf("%s: eval: %v", name, err)
		}
		if got, want := out.Value() == true, podmodel.ReachesGPU(&pod, names); got != want {
			t.Errorf("%s: matchCondition says %v, ReachesGPU says %v", name, got, want)
		}
		if podmodel.Wants(&pod, names) && out.Value() != true {
			t.Errorf("%s: asks for vGPU resources, and the matchCondition skips it", name)
		}
		if out.Value() == true {
			matched++
		}
	}
	if matched < 10 {
		t.Fatalf("only %d pods matched; the test data should exercise the condition", matched)
	}
}

// The Job webhook's matchCondition takes exactly the Jobs whose pod
// template asks for vGPU resources, as podmodel.Wants reads a pod.
func TestJobMatchConditionAgreesWithPodWants(t *testing.T) {
	prg := matchCondition(t, 3)
	names := wellknown.DefaultResourceNames()
	matched := 0
	for name, raw := range conditionPods(t) {
		var tmpl map[string]any
		var pod corev1.Pod
		if err := json.Unmarshal(raw, &tmpl); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &pod); err != nil {
			t.Fatal(err)
		}
		if len(pod.Spec.Containers) == 0 {
			continue
		}
		job := map[string]any{"metadata": map[string]any{}, "spec": map[string]any{"template": tmpl}}
		out, _, err := prg.Eval(map[string]any{"object": job})
		if err != nil {
			t.Fatalf("%s: eval: %v", name, err)
		}
		if got, want := out.Value() == true, podmodel.Wants(&pod, names); got != want {
			t.Errorf("%s: the Job matchCondition says %v, Wants says %v", name, got, want)
		}
		if out.Value() == true {
			matched++
		}
	}
	if matched < 10 {
		t.Fatalf("only %d templates matched; the test data should exercise the condition", matched)
	}
}

// matchCondition compiles the first matchCondition of webhook i.
func matchCondition(t *testing.T, i int) cel.Program {
	t.Helper()
	expr := readWebhookConfig(t).Webhooks[i].MatchConditions[0].Expression
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType), cel.OptionalTypes())
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("compile matchCondition: %v", iss.Err())
	}
	if ast.OutputType() != cel.BoolType {
		t.Fatalf("matchCondition yields %s, want bool", ast.OutputType())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	return prg
}

// conditionPods are pods that could reach a GPU or not, by name.
func conditionPods(t *testing.T) map[string][]byte {
	pods := map[string][]byte{
		"init requests only": []byte(`{"spec":{"initContainers":[{"name":"i","resources":{"requests":{"nvidia.com/gpucores":"10"}}}],"containers":[{"name":"c"}]}}`),
		"priority only":      []byte(`{"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/priority":"1"}}}]}}`),
		"no resources key":   []byte(`{"spec":{"containers":[{"name":"c"}]}}`),
		"other resource":     []byte(`{"spec":{"containers":[{"name":"c","resources":{"limits":{"amd.com/gpu":"1"}}}]}}`),
		"privileged":         []byte(`{"spec":{"containers":[{"name":"c","securityContext":{"privileged":true}}]}}`),
		"privileged init":    []byte(`{"spec":{"initContainers":[{"name":"i","securityContext":{"privileged":true}}],"containers":[{"name":"c"}]}}`),
		"not privileged":     []byte(`{"spec":{"containers":[{"name":"c","securityContext":{"privileged":false}}]}}`),
		"ephemeral gpu":      []byte(`{"spec":{"containers":[{"name":"c"}],"ephemeralContainers":[{"name":"e","securityContext":{"privileged":true}}]}}`),
		"runtime class":      []byte(`{"spec":{"runtimeClassName":"nvidia-cdi","containers":[{"name":"c"}]}}`),
		"runc class":         []byte(`{"spec":{"runtimeClassName":"runc","containers":[{"name":"c"}]}}`),
		"resource claim":     []byte(`{"spec":{"resourceClaims":[{"name":"gpu","resourceClaimName":"x"}],"containers":[{"name":"c"}]}}`),
		"host dev":           []byte(`{"spec":{"volumes":[{"name":"d","hostPath":{"path":"/dev/nvidia0"}}],"containers":[{"name":"c"}]}}`),
		"host dev spelt":     []byte(`{"spec":{"volumes":[{"name":"d","hostPath":{"path":"//./dev"}}],"containers":[{"name":"c"}]}}`),
		"host root":          []byte(`{"spec":{"volumes":[{"name":"d","hostPath":{"path":"/"}}],"containers":[{"name":"c"}]}}`),
		"cdi annotation":     []byte(`{"metadata":{"annotations":{"nvidia.cdi.k8s.io/container.c":"nvidia.com/gpu=all"}},"spec":{"containers":[{"name":"c"}]}}`),
		"dra extended":       []byte(`{"spec":{"containers":[{"name":"c","resources":{"requests":{"deviceclass.resource.kubernetes.io/gpu.nvidia.com":"1"}}}]}}`),
		"k3s runtime class":  []byte(`{"spec":{"runtimeClassName":"nvidia-experimental","containers":[{"name":"c"}]}}`),
		"host devices dir":   []byte(`{"spec":{"volumes":[{"name":"d","hostPath":{"path":"/devices"}}],"containers":[{"name":"c"}]}}`),
		"host var":           []byte(`{"spec":{"volumes":[{"name":"d","hostPath":{"path":"/var/log"}}],"containers":[{"name":"c"}]}}`),
		"other nvidia":       []byte(`{"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/mig-1g.5gb":"1"}}}]}}`),
		"second container":   []byte(`{"spec":{"containers":[{"name":"a"},{"name":"b","resources":{"limits":{"nvidia.com/gpumem-percentage":"50"}}}]}}`),
	}
	maps.Copy(pods, admissionPods(t))
	return pods
}

// admissionPods are the pods of the admission test data, by file name:
// each review's request object (empty for a review that has none).
func admissionPods(t *testing.T) map[string][]byte {
	t.Helper()
	pods := map[string][]byte{}
	files, _ := filepath.Glob(filepath.Join("testdata", "admission", "*.json"))
	for _, f := range files {
		if strings.HasSuffix(f, ".want.json") || strings.Contains(f, "undecodable") {
			continue
		}
		var r struct {
			Request struct{ Object json.RawMessage } `json:"request"`
		}
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		pods[filepath.Base(f)] = r.Request.Object
	}
	return pods
}
