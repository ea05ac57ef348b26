package webhook

import (
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vgpud/vgpud/protocol/podmodel"
)

// handleJobRaw sends raw as a Job CREATE in team-a and returns the answer
// and the Job the patch makes.
func handleJobRaw(t *testing.T, p *Pods, raw string) (*admissionv1.AdmissionResponse, *batchv1.Job) {
	t.Helper()
	req := &admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "team-a", Object: runtime.RawExtension{Raw: []byte(raw)}}
	req.Kind.Group, req.Kind.Version, req.Kind.Kind = "batch", "v1", "Job"
	resp := p.Handle(t.Context(), req)
	_, patched := applyPatch(t, []byte(raw), resp)
	var job batchv1.Job
	if err := json.Unmarshal(patched, &job); err != nil {
		t.Fatal(err)
	}
	return resp, &job
}

// A Job's template is completed as its pods will be, so that Kueue,
// which counts the template, counts a GPU where only memory is named and
// every core of a whole GPU; the quota is not judged on a template.
func TestJobTemplateCompletedAsItsPods(t *testing.T) {
	full := quotas{"team-a": {Memory: podmodel.Limit{Set: true, Hard: 1, Used: 1}}}
	p := newPods(testConfig(), full)
	for _, tc := range []struct {
		name, raw          string
		gpu, cores, memory string
	}{
		{"memory only", `{"metadata":{"name":"j"},"spec":{"template":{"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpumem":"3000"}}}]}}}}`, "1", "", "3000"},
		{"whole GPU, no metadata", `{"metadata":{"name":"j"},"spec":{"template":{"spec":{"containers":[{"name":"c","resources":{"requests":{"nvidia.com/gpu":"2"}}}]}}}}`, "2", "100", ""},
		{"opted out by the template's label", `{"metadata":{"name":"j"},"spec":{"template":{"metadata":{"labels":{"vgpud.io/webhook":"ignore"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpumem":"3000"}}}]}}}}`, "1", "", "3000"},
		{"complete already", `{"metadata":{"name":"j"},"spec":{"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"2","nvidia.com/gpumem":"2000","nvidia.com/gpucores":"25"}}}]}}}}`, "2", "25", "2000"},
	} {
		resp, job := handleJobRaw(t, p, tc.raw)
		if !resp.Allowed {
			t.Fatalf("%s: refused: %s", tc.name, resp.Result.Message)
		}
		tmpl := job.Spec.Template
		c := tmpl.Spec.Containers[0]
		for n, want := range map[string]string{"nvidia.com/gpu": tc.gpu, "nvidia.com/gpucores": tc.cores, "nvidia.com/gpumem": tc.memory} {
			l, r := c.Resources.Limits[corev1.ResourceName(n)], c.Resources.Requests[corev1.ResourceName(n)]
			if want == "" {
				if !l.IsZero() || !r.IsZero() {
					t.Errorf("%s: %s limit %s request %s; want none", tc.name, n, l.String(), r.String())
				}
				continue
			}
			if w := resource.MustParse(want); l.Cmp(w) != 0 || r.Cmp(w) != 0 {
				t.Errorf("%s: %s limit %s request %s; want %s both", tc.name, n, l.String(), r.String(), want)
			}
		}
		if tmpl.Spec.SchedulerName != "vgpud-scheduler" || tmpl.Annotations["required-plugins.noderesource.dev"] == "" {
			t.Errorf("%s: template scheduler %q annotations %v", tc.name, tmpl.Spec.SchedulerName, tmpl.Annotations)
		}
		if tc.name == "opted out by the template's label" && tmpl.Labels["vgpud.io/webhook"] != "ignore" {
			t.Errorf("%s: the template's labels changed: %v", tc.name, tmpl.Labels)
		}
		if tmpl.Namespace != "" || job.Namespace != "" {
			t.Errorf("%s: the patch added a namespace", tc.name)
		}
	}
}

// A template whose pods would be refused is refused at the Job's create;
// one for another scheduler, or without vGPU resources, is left alone.
func TestJobTemplateRefusedOrLeft(t *testing.T) {
	p := newPods(testConfig(), nil)
	resp, _ := handleJobRaw(t, p, `{"metadata":{"name":"j"},"spec":{"template":{"spec":{"containers":[{"name":"c","securityContext":{"privileged":true},"resources":{"limits":{"nvidia.com/gpumem":"3000"}}}]}}}}`)
	if resp.Allowed || !strings.Contains(resp.Result.Message, "pod template") || !strings.Contains(resp.Result.Message, "privileged") {
		t.Fatalf("privileged template: %+v", resp.Result)
	}
	for name, raw := range map[string]string{
		"volcano": `{"metadata":{"name":"j"},"spec":{"template":{"spec":{"schedulerName":"volcano","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpumem":"3000"}}}]}}}}`,
		"cpu":     `{"metadata":{"name":"j"},"spec":{"template":{"spec":{"containers":[{"name":"c"}]}}}}`,
	} {
		resp, job := handleJobRaw(t, p, raw)
		if !resp.Allowed || len(job.Spec.Template.Spec.Containers[0].Resources.Limits) > 1 {
			t.Fatalf("%s: %+v %+v", name, resp, job.Spec.Template.Spec.Containers[0].Resources)
		}
	}
}

// A Job in a Kueue queue is told what its pods will hold that its
// template does not name, which Kueue cannot count; one that names all
// of it, or is in no queue, is told nothing.
func TestJobInKueueWarnedOfWhatItsTemplateLeavesUnnamed(t *testing.T) {
	p := newPods(testConfig(), nil)
	for _, tc := range []struct {
		name, labels, limits string
		want                 []string
	}{
		{"memory only", `{"kueue.x-k8s.io/queue-name":"q"}`, `{"nvidia.com/gpumem":"3000"}`, []string{`names no nvidia.com/gpucores:`}},
		{"whole GPU", `{"kueue.x-k8s.io/queue-name":"q"}`, `{"nvidia.com/gpu":"1"}`, []string{`names no nvidia.com/gpumem:`}},
		{"percentage", `{"kueue.x-k8s.io/queue-name":"q"}`, `{"nvidia.com/gpumem-percentage":"50","nvidia.com/gpucores":"20"}`, []string{`as nvidia.com/gpumem-percentage`}},
		{"named", `{"kueue.x-k8s.io/queue-name":"q"}`, `{"nvidia.com/gpumem":"3000","nvidia.com/gpucores":"20"}`, nil},
		{"no queue", `{}`, `{"nvidia.com/gpumem":"3000"}`, nil},
	} {
		raw := `{"metadata":{"name":"j","labels":` + tc.labels + `},"spec":{"template":{"spec":{"containers":[{"name":"c","resources":{"limits":` + tc.limits + `}}]}}}}`
		resp, _ := handleJobRaw(t, p, raw)
		if !resp.Allowed || len(resp.Warnings) != len(tc.want) {
			t.Fatalf("%s: allowed %v, warnings %q; want %q", tc.name, resp.Allowed, resp.Warnings, tc.want)
		}
		for i, w := range tc.want {
			if !strings.Contains(resp.Warnings[i], w) || !strings.Contains(resp.Warnings[i], "docs/batch.md") {
				t.Errorf("%s: warning %q lacks %q", tc.name, resp.Warnings[i], w)
			}
		}
	}
}
