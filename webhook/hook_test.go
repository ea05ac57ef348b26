package webhook

import (
	"encoding/json"
	"maps"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/manifests"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// markPatch is the webhook's whole patch for a pod without annotations
// that could reach a GPU and asks nothing else of it.
const markPatch = `[{"op":"add","path":"/metadata/annotations","value":{"required-plugins.noderesource.dev":"[\"vgpud\"]"}}]`

// hookPods are pods that could reach a GPU or not, and marked or not.
var hookPods = map[string]string{
	"cpu":               `{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}`,
	"privileged":        `{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","securityContext":{"privileged":true}}]}}`,
	"vgpu":              `{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpumem":"1000"}}}]}}`,
	"whole gpu":         `{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","resources":{"requests":{"nvidia.com/gpu":"1"}}}]}}`,
	"runtime class":     `{"metadata":{"name":"p"},"spec":{"runtimeClassName":"nvidia","containers":[{"name":"c"}]}}`,
	"host dev":          `{"metadata":{"name":"p"},"spec":{"volumes":[{"name":"d","hostPath":{"path":"/dev/./nvidia0"}}],"containers":[{"name":"c"}]}}`,
	"claim":             `{"metadata":{"name":"p"},"spec":{"resourceClaims":[{"name":"g","resourceClaimName":"x"}],"containers":[{"name":"c"}]}}`,
	"marked":            `{"metadata":{"name":"p","annotations":{"required-plugins.noderesource.dev":"[\"vgpud\"]"}},"spec":{"containers":[{"name":"c","securityContext":{"privileged":true}}]}}`,
	"marked with more":  `{"metadata":{"name":"p","annotations":{"required-plugins.noderesource.dev":"[\"vgpud\", \"other\"]"}},"spec":{"containers":[{"name":"c","securityContext":{"privileged":true}}]}}`,
	"vgpud not first":   `{"metadata":{"name":"p","annotations":{"required-plugins.noderesource.dev":"[\"other\", \"vgpud\"]"}},"spec":{"containers":[{"name":"c","securityContext":{"privileged":true}}]}}`,
	"marked, yaml list": `{"metadata":{"name":"p","annotations":{"required-plugins.noderesource.dev":"- vgpud"}},"spec":{"containers":[{"name":"c","securityContext":{"privileged":true}}]}}`,
	"scoped override":   `{"metadata":{"name":"p","annotations":{"required-plugins.noderesource.dev":"[\"vgpud\"]","required-plugins.noderesource.dev/container.c":"[]"}},"spec":{"containers":[{"name":"c","securityContext":{"privileged":true}}]}}`,
	"scoped, vgpud":     `{"metadata":{"name":"p","annotations":{"required-plugins.noderesource.dev":"[\"vgpud\"]","required-plugins.noderesource.dev/pod":"[\"vgpud\"]"}},"spec":{"containers":[{"name":"c","securityContext":{"privileged":true}}]}}`,
	"empty mark":        `{"metadata":{"name":"p","annotations":{"required-plugins.noderesource.dev":"[]"}},"spec":{"containers":[{"name":"c"}]}}`,
	"cdi annotation":    `{"metadata":{"name":"p","annotations":{"nvidia.cdi.k8s.io/container.c":"nvidia.com/gpu=all"}},"spec":{"containers":[{"name":"c"}]}}`,
	"cdi runtime key":   `{"metadata":{"name":"p","annotations":{"cdi.k8s.io/x":"nvidia.com/gpu=0"}},"spec":{"containers":[{"name":"c"}]}}`,
	"dra extended":      `{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","resources":{"limits":{"deviceclass.resource.kubernetes.io/gpu.nvidia.com":"1"}}}]}}`,
	"k3s runtime class": `{"metadata":{"name":"p"},"spec":{"runtimeClassName":"nvidia-experimental","containers":[{"name":"c"}]}}`,
	"host root":         `{"metadata":{"name":"p"},"spec":{"volumes":[{"name":"d","hostPath":{"path":"/"}}],"containers":[{"name":"c"}]}}`,
	"opted-out label":   `{"metadata":{"name":"p","labels":{"vgpud.io/webhook":"ignore"}},"spec":{"containers":[{"name":"c","securityContext":{"privileged":true}}]}}`,
	"other prefix key":  `{"metadata":{"name":"p","annotations":{"required-plugins.noderesource.dev":"[\"vgpud\"]","required-plugins.noderesource.dev.example.com/x":"[]"}},"spec":{"containers":[{"name":"c","securityContext":{"privileged":true}}]}}`,
}

// The webhook marks what could reach a GPU, outside the hook-optional
// namespaces, and leaves a mark already there alone.
func TestWebhookMarksPodsThatCouldReachAGPU(t *testing.T) {
	h := newPods(testConfig(), nil)
	for name, raw := range hookPods {
		for _, ns := range []string{"team-a", "kube-system"} {
			req := &admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: ns, Object: runtime.RawExtension{Raw: []byte(raw)}}
			req.Kind.Kind = "Pod"
			resp := h.Handle(t.Context(), req)
			var pod corev1.Pod
			if err := json.Unmarshal([]byte(raw), &pod); err != nil {
				t.Fatal(err)
			}
			if !resp.Allowed {
				if podmodel.Wants(&pod, wellknown.DefaultResourceNames()) {
					continue // judged as a vGPU pod: pods_test.go
				}
				t.Fatalf("%s in %s refused: %v", name, ns, resp.Result)
			}
			_, patched := applyPatch(t, []byte(raw), resp)
			var out corev1.Pod
			if err := json.Unmarshal(patched, &out); err != nil {
				t.Fatal(err)
			}
			want := ns == "team-a" && podmodel.ReachesGPU(&pod, wellknown.DefaultResourceNames())
			got := podmodel.ListsVgpud(out.Annotations[wellknown.AnnotationRequiredPlugins])
			if got != want && !(got && podmodel.ListsVgpud(pod.Annotations[wellknown.AnnotationRequiredPlugins])) {
				t.Errorf("%s in %s: marked %v, want %v (annotations %v)", name, ns, got, want, out.Annotations)
			}
			if before, ok := pod.Annotations[wellknown.AnnotationRequiredPlugins]; ok && podmodel.ListsVgpud(before) && out.Annotations[wellknown.AnnotationRequiredPlugins] != before {
				t.Errorf("%s: the pod's own mark %q became %q", name, before, out.Annotations[wellknown.AnnotationRequiredPlugins])
			}
		}
	}
}

// The manifest's policies say in CEL what podmodel says in Go: which
// pods could reach a GPU (vgpud-runtime-hook-required's and
// vgpud-hook-required's variables) and which are marked.
func TestHookPoliciesAgreeWithPodmodel(t *testing.T) {
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType), cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)), cel.OptionalTypes(), ext.Strings())
	if err != nil {
		t.Fatal(err)
	}
	variables := func(kind, name string) []admissionregistrationv1.Variable {
		doc, err := manifests.Named(kind, name)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Spec struct {
				Variables []admissionregistrationv1.Variable `json:"variables"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &p); err != nil {
			t.Fatal(err)
		}
		return p.Spec.Variables
	}
	eval := func(vs []admissionregistrationv1.Variable, obj map[string]any) map[string]any {
		vars := map[string]any{}
		for _, v := range vs {
			ast, iss := env.Compile(v.Expression)
			if iss.Err() != nil {
				t.Fatalf("compile %s: %v", v.Name, iss.Err())
			}
			prg, err := env.Program(ast)
			if err != nil {
				t.Fatal(err)
			}
			// At create: no oldObject.
			out, _, err := prg.Eval(map[string]any{"object": obj, "oldObject": nil, "variables": maps.Clone(vars)})
			if err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
			vars[v.Name] = out.Value()
		}
		return vars
	}
	vap := variables("ValidatingAdmissionPolicy", "vgpud-runtime-hook-required")
	mp := variables("MutatingAdmissionPolicy", "vgpud-hook-required")
	names := wellknown.DefaultResourceNames()
	pods := maps.Clone(hookPods)
	for name, raw := range admissionPods(t) {
		pods["admission "+name] = string(raw)
	}
	reaching := 0
	for name, raw := range pods {
		var obj map[string]any
		var pod corev1.Pod
		if json.Unmarshal([]byte(raw), &obj) != nil || json.Unmarshal([]byte(raw), &pod) != nil || len(pod.Spec.Containers) == 0 {
			continue
		}
		want := podmodel.ReachesGPU(&pod, names)
		if want {
			reaching++
		}
		v, m := eval(vap, obj), eval(mp, obj)
		if v["reaches"] != want || m["reaches"] != want {
			t.Errorf("%s: the policies say it could reach a GPU: %v, %v; ReachesGPU says %v", name, v["reaches"], m["reaches"], want)
		}
		if got, want := v["marked"] == true, podmodel.RequiresHook(pod.Annotations); got != want {
			t.Errorf("%s: vgpud-runtime-hook-required says marked %v; RequiresHook says %v", name, got, want)
		}
	}
	if reaching < 8 {
		t.Fatalf("only %d pods could reach a GPU; the test data should exercise the policies", reaching)
	}
}
