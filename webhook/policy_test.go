package webhook

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vgpud/vgpud/manifests"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// The manifest's vgpud-gpu-pods policy sets in the apiserver what the
// webhook's own rules would (mutateContainer): a GPU count for a
// container that gives only memory or cores, all cores for a whole card.
// It runs first, and alone when no replica answers, so the two must
// agree on every pod the webhook patches: each container gets the same
// additions from both.
func TestGPUPodsPolicyAgreesWithTheWebhook(t *testing.T) {
	policy, _, err := manifests.GPUPodsPolicy()
	if err != nil {
		t.Fatal(err)
	}
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType), cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)), cel.OptionalTypes(), ext.Strings())
	if err != nil {
		t.Fatal(err)
	}
	// The policy's variables, in order, each seeing the ones before.
	eval := func(obj map[string]any) map[string]any {
		vars := map[string]any{}
		for _, v := range policy.Spec.Variables {
			ast, iss := env.Compile(v.Expression)
			if iss.Err() != nil {
				t.Fatalf("compile variable %s: %v", v.Name, iss.Err())
			}
			prg, err := env.Program(ast)
			if err != nil {
				t.Fatal(err)
			}
			out, _, err := prg.Eval(map[string]any{"object": obj, "variables": vars})
			if err != nil {
				t.Fatalf("variable %s: %v", v.Name, err)
			}
			vars[v.Name] = out
		}
		return vars
	}
	// What the policy's one mutation sets, as "container resource=value".
	summary, iss := env.Compile(`(variables.initSet + variables.appSet).map(a,
		a.res.map(k, a.name + ' ' + k + '=' + a.res[k]).join('|'))`)
	if iss.Err() != nil {
		t.Fatal(iss.Err())
	}
	summarize, err := env.Program(summary)
	if err != nil {
		t.Fatal(err)
	}
	names := wellknown.DefaultResourceNames()
	compared := 0
	for f, raw := range admissionPods(t) {
		var pod corev1.Pod
		if len(raw) == 0 || json.Unmarshal(raw, &pod) != nil {
			continue
		}
		// The apiserver hands CEL the decoded pod: quantities as
		// canonical strings ("1e2" as "100").
		canon, err := json.Marshal(&pod)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := json.Unmarshal(canon, &obj); err != nil {
			t.Fatal(err)
		}
		before := pod.DeepCopy()
		p := NewPods(DefaultConfig(), "vgpud-scheduler", names, nil)
		if v := p.Decide(&pod); v.Deny != "" || v.Skip != "" || pod.Spec.NodeName != "" {
			continue // the webhook patches nothing; the policy's own match decides
		}
		want := added(before, &pod)
		out, _, err := summarize.Eval(map[string]any{"object": obj, "variables": eval(obj)})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		native, err := out.ConvertToNative(reflect.TypeOf([]string{}))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range native.([]string) {
			got = append(got, strings.Split(l, "|")...)
		}
		got = canonical(got)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: the policy sets %v, the webhook %v", f, got, want)
		}
		compared++
	}
	if compared < 10 {
		t.Fatalf("only %d pods compared; the test data should exercise the policy", compared)
	}
}

// added lists "container resource=value" for each vGPU resource the
// webhook added to a container's limits, sorted, values canonical.
func added(before, after *corev1.Pod) []string {
	var out []string
	lists := [][2][]corev1.Container{{before.Spec.InitContainers, after.Spec.InitContainers}, {before.Spec.Containers, after.Spec.Containers}}
	for _, l := range lists {
		for i, c := range l[1] {
			for _, res := range wellknown.DefaultResourceNames().All() {
				if _, had := l[0][i].Resources.Limits[corev1.ResourceName(res)]; had {
					continue
				}
				if q, has := c.Resources.Limits[corev1.ResourceName(res)]; has {
					out = append(out, c.Name+" "+res+"="+q.String())
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// canonical rewrites each "container resource=value" with the value as
// a Quantity prints it.
func canonical(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		k, v, _ := strings.Cut(s, "=")
		if q, err := resource.ParseQuantity(v); err == nil {
			v = q.String()
		}
		out = append(out, k+"="+v)
	}
	return out
}
