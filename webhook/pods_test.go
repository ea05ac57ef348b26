package webhook

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// quotas is a fixed Quotas for tests.
type quotas map[string]podmodel.Quota

func (q quotas) NamespaceQuota(ns string) podmodel.Quota { return q[ns] }

// The smallest GPU tests know: an A100's 40960 MiB.
func (q quotas) SmallestGPUMiB() int64 { return 40960 }

func testConfig() Config { return DefaultConfig() }

// newPods is the Handler as the cluster role builds it, with the default
// scheduler and resource names.
func newPods(cfg Config, q Quotas) *Pods {
	return NewPods(cfg, "vgpud-scheduler", wellknown.DefaultResourceNames(), q)
}

// readReview loads testdata/admission/<name>.json, an AdmissionReview as the
// apiserver sends it.
func readReview(t testing.TB, name string) (*admissionv1.AdmissionReview, []byte) {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", "admission", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &r, body
}

// applyPatch applies resp's JSON patch to raw and decodes the pod.
func applyPatch(t testing.TB, raw []byte, resp *admissionv1.AdmissionResponse) (*corev1.Pod, []byte) {
	t.Helper()
	patched := raw
	if len(resp.Patch) > 0 {
		if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
			t.Fatalf("patch without patchType JSONPatch")
		}
		p, err := jsonpatchapply.DecodePatch(resp.Patch)
		if err != nil {
			t.Fatalf("decode patch %s: %v", resp.Patch, err)
		}
		if patched, err = p.Apply(raw); err != nil {
			t.Fatalf("apply patch %s: %v", resp.Patch, err)
		}
	}
	var pod corev1.Pod
	if err := json.Unmarshal(patched, &pod); err != nil {
		t.Fatalf("decode patched pod: %v", err)
	}
	return &pod, patched
}

func TestPodsAdmission(t *testing.T) {
	const (
		patched   = "patched"
		unchanged = "unchanged"
		deny      = "denied"
		errorCode = "errored"
	)
	aiTeam := quotas{"ai-team": {Memory: podmodel.Limit{Set: true, Hard: 40000, Used: 38000}, Cores: podmodel.Limit{Set: true, Hard: 200, Used: 100}}}
	tests := []struct {
		name   string
		cfg    func(*Config)
		quotas Quotas
		want   string
		msg    string // substring of the answer's message
	}{
		// Mutations; the expected pod is <name>.want.json.
		{name: "mem_only_adds_gpu", want: patched},
		{name: "mig_profile", want: patched},
		{name: "mig_profile_and_gpumem", want: deny, msg: `container "train" asks nvidia.com/mig-1g.5gb and also nvidia.com/gpumem; ask one way`},
		{name: "mig_profile_shared_mode", want: deny, msg: `container "train" asks MIG profile 1g.5gb, but the pod's annotations ask slices of GPUs not in MIG mode`},
		{name: "mig_profile_two", want: deny, msg: `container "train": nvidia.com/mig-1g.5gb is 2; it must be within 1..1 (a process sees one MIG device`},
		{name: "whole_card_exclusive_cores", want: patched},
		{name: "whole_card_percentage_100", want: patched},
		{name: "half_card_no_exclusive", want: patched},
		{name: "cores_only_adds_gpu", want: patched},
		{name: "percentage_only_whole_card", want: patched},
		// The priority reaches the container from the resource (the
		// runtime hook, the device plugin), not from env set here; a pod's
		// own CUDA_TASK_PRIORITY is the vgpud-slice-env policy's to refuse.
		{name: "priority_sets_no_env", want: patched},
		{name: "priority_user_env_left_to_policy", want: patched},
		{name: "core_policy_env", cfg: func(c *Config) { c.CorePolicy = CorePolicyForce }, want: patched},
		{name: "limits_only_v1beta1", want: patched},
		{name: "requests_only_become_limits", want: patched},
		{name: "runtime_class_set", cfg: func(c *Config) { c.RuntimeClass = "nvidia" }, want: patched},
		{name: "runtime_class_kept", cfg: func(c *Config) { c.RuntimeClass = "nvidia" }, want: patched},
		{name: "visible_devices_none", cfg: func(c *Config) { c.VisibleDevicesNone = true }, want: patched},
		{name: "init_containers", want: patched},
		{name: "multiple_containers", want: patched},
		{name: "mixed_privileged_unprivileged", want: patched},
		{name: "empty_scheduler_name", want: patched},
		{name: "quota_fits", quotas: aiTeam, want: patched},

		// Admitted untouched.
		{name: "already_complete", want: unchanged}, // but for the mark
		{name: "other_scheduler", want: unchanged, msg: "scheduled by volcano"},
		{name: "opt_out_label", want: unchanged, msg: "opted out"},
		{name: "opt_out_hami_label", want: unchanged, msg: "opted out"},
		{name: "no_gpu", want: unchanged, msg: "asks for no vGPU resources"},
		{name: "no_gpu_visible_devices_on", cfg: func(c *Config) { c.VisibleDevicesNone = true }, want: unchanged, msg: "asks for no vGPU resources"},
		{name: "privileged_no_gpu", want: unchanged, msg: "asks for no vGPU resources"},
		{name: "update_ignored", want: unchanged, msg: "only CREATE"},

		// Denials, each saying what to change.
		{name: "no_containers", want: deny, msg: "pod has no containers; add at least one under spec.containers"},
		{name: "node_name_set", want: deny, msg: `spec.nodeName is already "gpu-node-1", which skips the scheduler that assigns GPUs; remove spec.nodeName`},
		{name: "privileged_gpu", want: deny, msg: `container "train" is privileged and asks for nvidia.com/gpumem, nvidia.com/gpucores; a privileged container sees every GPU, so vGPU limits cannot hold: drop securityContext.privileged or the vGPU resources`},
		{name: "privileged_init_gpu", want: deny, msg: `container "setup" is privileged and asks for nvidia.com/gpu`},
		{name: "negative_gpu", want: deny, msg: `container "train": nvidia.com/gpu is -1; it must be within 0..64`},
		{name: "percentage_over_100", want: deny, msg: `container "train": nvidia.com/gpumem-percentage is 150; it must be within 1..100`},
		{name: "cores_over_100", want: deny, msg: `container "train": nvidia.com/gpucores is 120; it must be within 0..100`},
		{name: "memory_with_zero_count", want: deny, msg: `container "train": nvidia.com/gpu is 0 but it asks for GPU memory or cores; set nvidia.com/gpu to 1 or more`},
		{name: "gpu_zero_alone", want: deny, msg: `container "train": nvidia.com/gpu is 0; a container that needs no GPU names no vGPU resource: remove nvidia.com/gpu`},
		{name: "selector_too_many", want: deny, msg: "annotation nvidia.com/use-gputype lists 65 entries, more than 64: name fewer GPU types or UUIDs"},
		{name: "memory_zero", want: deny, msg: `container "train": nvidia.com/gpumem is 0; it must be within 1..`},
		{name: "absurd_gpu_count", want: deny, msg: `container "train": nvidia.com/gpu is 1000; it must be within 0..64`},
		{name: "request_differs_from_limit", want: deny, msg: `container "train": nvidia.com/gpumem request 2k differs from its limit 4k; set them equal or drop the request`},
		{name: "two_bad_containers", want: deny, msg: `container "a": nvidia.com/gpucores is 101; it must be within 0..100; container "b" is privileged`},
		{name: "quota_memory_exceeded", quotas: aiTeam, want: deny, msg: "namespace ai-team: gpumem quota 40000 MiB, in use 38000, this pod is charged 4000; lower nvidia.com/gpumem"},
		{name: "quota_cores_exceeded", quotas: aiTeam, want: deny, msg: "namespace ai-team: gpucores quota 200, in use 100, this pod is charged 120; lower nvidia.com/gpucores"},
		{name: "quota_exclusive_whole_memory", quotas: aiTeam, want: deny, msg: "gpumem quota 40000 MiB, in use 38000, this pod is charged 40960, a GPU with all its cores (nvidia.com/gpucores 100) counting its whole memory"},
		{name: "quota_mutex_whole_gpu", quotas: aiTeam, want: deny, msg: "gpumem quota 40000 MiB, in use 38000, this pod is charged 40960, each GPU it holds alone by the mutex policy counting its whole memory (leave mutex out to be charged the slice)"},
		{name: "gpu_policy_unknown", want: deny, msg: `annotation hami.io/gpu-scheduler-policy="binpack,nvlink": unknown policy "nvlink": want a comma-separated chain of`},
		{name: "quota_init_counts_max", quotas: aiTeam, want: deny, msg: "gpumem quota 40000 MiB, in use 38000, this pod is charged 3000"},

		{name: "undecodable_pod", want: errorCode, msg: "decode pod ai-team/train"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			review, _ := readReview(t, tt.name)
			raw := review.Request.Object.Raw
			resp := newPods(cfg, tt.quotas).Handle(context.Background(), review.Request)
			msg := ""
			if resp.Result != nil {
				msg = resp.Result.Message
			}
			if !strings.Contains(msg, tt.msg) {
				t.Errorf("message %q does not contain %q", msg, tt.msg)
			}
			switch tt.want {
			case deny:
				if resp.Allowed || resp.Result.Code != 403 || len(resp.Patch) > 0 {
					t.Fatalf("want a 403 denial without patch, got allowed=%v code=%d patch=%s", resp.Allowed, resp.Result.Code, resp.Patch)
				}
				return
			case errorCode:
				if resp.Allowed || resp.Result.Code != 400 {
					t.Fatalf("want a 400 error, got allowed=%v %+v", resp.Allowed, resp.Result)
				}
				return
			case unchanged:
				// Untouched but for the mark a pod that could reach a
				// GPU gets (hook_test.go).
				if !resp.Allowed || (len(resp.Patch) > 0 && string(resp.Patch) != markPatch) {
					t.Fatalf("want admitted untouched, got allowed=%v patch=%s", resp.Allowed, resp.Patch)
				}
				return
			}
			if !resp.Allowed || len(resp.Patch) == 0 {
				t.Fatalf("want admitted with a patch, got allowed=%v %+v", resp.Allowed, resp.Result)
			}
			got, _ := applyPatch(t, raw, resp)
			wantRaw, err := os.ReadFile(filepath.Join("testdata", "admission", tt.name+".want.json"))
			if err != nil {
				t.Fatal(err)
			}
			var want corev1.Pod
			if err := json.Unmarshal(wantRaw, &want); err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(got, &want) {
				g, _ := json.MarshalIndent(got, "", "  ")
				t.Fatalf("patched pod differs from %s.want.json\npatch: %s\ngot: %s", tt.name, resp.Patch, g)
			}
			assertMinimal(t, resp.Patch)
		})
	}
}

// assertMinimal fails on patch ops outside what the webhook may change:
// NRI's required-plugins annotation, spec.schedulerName,
// spec.runtimeClassName and containers' resources and env.
func assertMinimal(t *testing.T, patch []byte) {
	t.Helper()
	var ops []struct{ Op, Path string }
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		p := op.Path
		ok := p == "/spec/schedulerName" || p == "/spec/runtimeClassName" || p == "/metadata" || p == "/metadata/annotations" || p == "/metadata/annotations/required-plugins.noderesource.dev"
		for _, list := range []string{"/spec/containers/", "/spec/initContainers/"} {
			if rest, found := strings.CutPrefix(p, list); found {
				_, field, _ := strings.Cut(rest, "/")
				ok = ok || strings.HasPrefix(field, "resources") || strings.HasPrefix(field, "env")
			}
		}
		if !ok || op.Op == "remove" {
			t.Errorf("patch op %s %s touches what the webhook did not change", op.Op, p)
		}
	}
}

func TestPodsHandleOtherKindsWithWarning(t *testing.T) {
	review, _ := readReview(t, "mem_only_adds_gpu")
	req := review.Request.DeepCopy()
	req.Kind.Group, req.Kind.Kind = "apps", "Deployment"
	resp := newPods(testConfig(), nil).Handle(context.Background(), req)
	if !resp.Allowed || len(resp.Patch) > 0 || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "handles only pods") {
		t.Fatalf("Deployment: %+v", resp)
	}
	req = review.Request.DeepCopy()
	req.SubResource = "ephemeralcontainers"
	if resp := newPods(testConfig(), nil).Handle(context.Background(), req); !resp.Allowed || len(resp.Patch) > 0 {
		t.Fatalf("subresource: %+v", resp)
	}
}

// A pod created with generateName and no namespace in the object: the
// quota is looked up in the request's namespace and the patch adds none.
func TestPodsHandleNamespaceFromRequest(t *testing.T) {
	review, _ := readReview(t, "quota_memory_exceeded")
	req := review.Request.DeepCopy()
	var obj map[string]any
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		t.Fatal(err)
	}
	delete(obj["metadata"].(map[string]any), "namespace")
	req.Object.Raw, _ = json.Marshal(obj)
	q := quotas{"ai-team": {Memory: podmodel.Limit{Set: true, Hard: 40000, Used: 38000}}}
	if resp := newPods(testConfig(), q).Handle(context.Background(), req); resp.Allowed || !strings.Contains(resp.Result.Message, "namespace ai-team") {
		t.Fatalf("quota not checked in the request's namespace: %+v", resp.Result)
	}
	resp := newPods(testConfig(), nil).Handle(context.Background(), req)
	if strings.Contains(string(resp.Patch), "namespace") || len(resp.Patch) == 0 {
		t.Fatalf("patch %s", resp.Patch)
	}
}

// A pod whose vgpud and HAMi policy annotations differ is admitted by
// vgpud's, and its author is told that HAMi's is ignored.
func TestShadowedPolicyWarns(t *testing.T) {
	review, _ := readReview(t, "mem_only_adds_gpu")
	var pod corev1.Pod
	if err := json.Unmarshal(review.Request.Object.Raw, &pod); err != nil {
		t.Fatal(err)
	}
	pod.Annotations = map[string]string{"vgpud.io/gpu-policy": "binpack", "hami.io/gpu-scheduler-policy": "mutex"}
	raw, err := json.Marshal(&pod)
	if err != nil {
		t.Fatal(err)
	}
	review.Request.Object.Raw = raw
	resp := newPods(testConfig(), nil).Handle(context.Background(), review.Request)
	if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], `hami.io/gpu-scheduler-policy="mutex" is ignored: vgpud.io/gpu-policy="binpack" wins`) {
		t.Fatalf("allowed %v, warnings %q", resp.Allowed, resp.Warnings)
	}
}
