package manifests

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"sigs.k8s.io/yaml"
)

// helmTemplate renders charts/vgpud with the Helm at $VGPUD_HELM (make
// chart builds it: scripts/helm.sh) and returns its objects by kind/name.
func helmTemplate(t *testing.T, namespace string, set ...string) map[string]map[string]any {
	t.Helper()
	out, err := helmRender(t, namespace, set...)
	if err != nil {
		t.Fatal(err)
	}
	return objects(t, out)
}

// helmRender is helm template's output, or its error with what it said.
func helmRender(t *testing.T, namespace string, set ...string) (string, error) {
	t.Helper()
	helm := os.Getenv("VGPUD_HELM")
	if helm == "" {
		t.Skip("needs Helm: make chart sets VGPUD_HELM")
	}
	// A 1.36 cluster's, as the manifest is made for, unless a
	// --kube-version=V says otherwise (then without the API 1.36 adds,
	// unless an --api-versions=... names it); the image the manifest
	// names, as a user must set one. Other --flags pass as they are.
	kube := []string{"--kube-version", "1.36.3", "--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"}
	args := []string{"template", "vgpud", "../charts/vgpud", "--namespace", namespace, "--set", "image.repository=ghcr.io/vgpud/vgpud"}
	for _, s := range set {
		switch {
		case strings.HasPrefix(s, "--kube-version="):
			kube = []string{s}
		case strings.HasPrefix(s, "--"):
			args = append(args, s)
		default:
			args = append(args, "--set", s)
		}
	}
	args = append(args, kube...)
	out, err := exec.Command(helm, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// objects parses a multi-document YAML stream, comments and empty
// documents aside, by kind/name.
func objects(t *testing.T, stream string) map[string]map[string]any {
	t.Helper()
	all := map[string]map[string]any{}
	for _, doc := range strings.Split(stream, "\n---") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%v in:\n%.400s", err, doc)
		}
		if o == nil {
			continue
		}
		meta, _ := o["metadata"].(map[string]any)
		key := fmt.Sprintf("%s/%s", o["kind"], meta["name"])
		if _, dup := all[key]; dup {
			t.Fatalf("%s twice", key)
		}
		all[key] = o
	}
	return all
}

// With its defaults the chart is the manifest, object for object; the
// Namespace only when asked (Helm makes it with --create-namespace).
func TestChartRendersTheManifest(t *testing.T) {
	want := objects(t, install)
	got := withoutHooks(helmTemplate(t, "vgpud-system"))
	ns := want["Namespace/vgpud-system"]
	delete(want, "Namespace/vgpud-system")
	compare := func(what string, got, want map[string]map[string]any) {
		for key, w := range want {
			if g, ok := got[key]; !ok {
				t.Errorf("%s: %s missing", what, key)
			} else if !reflect.DeepEqual(g, w) {
				gj, _ := json.MarshalIndent(g, "", " ")
				wj, _ := json.MarshalIndent(w, "", " ")
				t.Errorf("%s: %s differs:\nchart:    %s\nmanifest: %s", what, key, gj, wj)
			}
		}
		for key := range got {
			if _, ok := want[key]; !ok {
				t.Errorf("%s: %s is not in the manifest", what, key)
			}
		}
	}
	compare("helm template", got, want)
	want["Namespace/vgpud-system"] = ns
	compare("helm template --set namespace.create=true", withoutHooks(helmTemplate(t, "vgpud-system", "namespace.create=true")), want)
	t.Logf("the chart's defaults render the manifest's %d objects", len(want))
}

// The chart's removal reverts every node first: its pre-delete hook is
// manifests/node-revert.yaml, object for object, the DaemonSet before
// the Job that waits for it; with nodeSetup.enabled=false there is
// neither the init container nor the hook.
func TestChartRevertsNodesBeforeRemoval(t *testing.T) {
	want := objects(t, NodeRevert)
	got := map[string]map[string]any{}
	weights := map[string]any{}
	for key, o := range helmTemplate(t, "vgpud-system") {
		meta, _ := o["metadata"].(map[string]any)
		ann, _ := meta["annotations"].(map[string]any)
		if ann["helm.sh/hook"] != "pre-delete" {
			continue
		}
		weights[key] = ann["helm.sh/hook-weight"]
		delete(meta, "annotations")
		got[key] = o
	}
	if len(got) != len(want) {
		t.Fatalf("pre-delete hooks %v, want node-revert.yaml's %d objects", slices.Sorted(maps.Keys(got)), len(want))
	}
	for key, w := range want {
		if !reflect.DeepEqual(got[key], w) {
			gj, _ := json.Marshal(got[key])
			wj, _ := json.Marshal(w)
			t.Errorf("pre-delete hook %s differs from node-revert.yaml's:\nchart:    %s\nmanifest: %s", key, gj, wj)
		}
	}
	if raw, _ := json.Marshal(helmTemplate(t, "vgpud-system", "nodeSetup.revertTimeout=9m", "priorityClassName=gpu-infra")); !strings.Contains(string(raw), `"--wait-timeout=9m"`) || strings.Count(string(raw), `"priorityClassName":"gpu-infra"`) < 2 {
		t.Error("nodeSetup.revertTimeout or priorityClassName does not reach the revert hook")
	}
	// The Job's deadline follows the wait's timeout, 45 s after it.
	for timeout, deadline := range map[string]string{"9m": "585", "1h2m3s": "3768", "30s": "75"} {
		raw, _ := json.Marshal(helmTemplate(t, "vgpud-system", "nodeSetup.revertTimeout="+timeout)["Job/vgpud-node-revert"])
		if !strings.Contains(string(raw), `"activeDeadlineSeconds":`+deadline+`,`) {
			t.Errorf("nodeSetup.revertTimeout=%s: the revert Job %s; want activeDeadlineSeconds %s", timeout, raw, deadline)
		}
	}
	if weights["DaemonSet/vgpud-node-revert"] != "-10" || weights["Job/vgpud-node-revert"] != "0" {
		t.Errorf("hook weights %v: the DaemonSet must come before the Job that waits for it", weights)
	}
	// Off, the init container goes, but not the revert: nodes an earlier
	// release set up are still reverted (none labelled: nothing runs).
	off := helmTemplate(t, "vgpud-system", "nodeSetup.enabled=false")
	if _, ok := off["DaemonSet/vgpud-node-revert"]; !ok {
		t.Error("nodeSetup.enabled=false renders no revert hook: nodes set up before would never be reverted")
	}
	if ds, _ := json.Marshal(off["DaemonSet/vgpud"]); strings.Contains(string(ds), "node-setup") || strings.Contains(string(ds), "runtime-socket") {
		t.Errorf("nodeSetup.enabled=false still renders the node setup: %s", ds)
	}
	// The runtime's paths and restart reach both the init container and
	// the hook, with --runtime-config matching what the role reads.
	// CRI-O's socket and no restart follow from runtime.kind.
	crio := helmTemplate(t, "vgpud-system", "runtime.kind=cri-o", "runtime.configDir=/etc/crio")
	for _, key := range []string{"DaemonSet/vgpud", "DaemonSet/vgpud-node-revert"} {
		raw, _ := json.Marshal(crio[key])
		for _, wantS := range []string{`"--restart=none"`, `"--runtime-socket=/var/run/crio/crio.sock"`, `"--runtime-config=cri-o:/etc/crio/crio.conf"`, `"path":"/var/run/crio"`, `"mountPath":"/etc/crio"`} {
			if !strings.Contains(string(raw), wantS) {
				t.Errorf("%s with CRI-O's values lacks %s", key, wantS)
			}
		}
	}
}

// Another namespace and other names reach every place that names them:
// the policies' CEL strings, the scheduler's configuration, the node's
// settings.
func TestChartRendersOtherNamesEverywhere(t *testing.T) {
	got := helmTemplate(t, "gpu-share",
		"schedulerName=gpu-sched", "resourceNames.gpu=example.com/vgpu", "resourceNames.gpumem=example.com/vgpu-mem",
		"resourceNames.gpumemPercentage=example.com/vgpu-mem-pct", "resourceNames.gpucores=example.com/vgpu-cores",
		"resourceNames.priority=example.com/vgpu-prio", "gpuAgentAccounts={nvidia-dcgm-exporter,my-exporter}", "leaderNodes={gpu-1,gpu-2}",
		"image.digest=sha256:"+strings.Repeat("ab", 32), "monitoring.serviceMonitor=true", "monitoring.prometheusRule=true")
	raw, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, gone := range []string{"vgpud-system", "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/priority", "'nvidia.com/gpu'", "{name: nvidia.com/gpu,", "schedulerName: vgpud-scheduler", "== 'vgpud-scheduler')", "'default-scheduler', 'vgpud-scheduler'", "nvidia.com/mig-"} {
		if strings.Contains(text, gone) {
			t.Errorf("rendered with other names, the chart still says %q", gone)
		}
	}
	for _, want := range []string{
		"system:serviceaccount:gpu-share:vgpud", "'gpu-sched'", "schedulerName: gpu-sched", "'example.com/vgpu-mem-pct'",
		"https://vgpud.gpu-share.svc:8443", "ghcr.io/vgpud/vgpud@sha256:abab", `"leader-nodes":"gpu-1,gpu-2"`,
		`{"name":"VGPUD_SCHEDULER_NAME","value":"gpu-sched"}`, `{"name":"VGPUD_GPU_AGENT_ACCOUNTS","value":"vgpud,nvidia-dcgm-exporter,my-exporter"}`,
		`{"name":"VGPUD_RESOURCE_GPUMEM_PERCENTAGE","value":"example.com/vgpu-mem-pct"}`, `{"name":"VGPUD_RESOURCE_PRIORITY","value":"example.com/vgpu-prio"}`,
		"orValue('') in ['vgpud', 'nvidia-dcgm-exporter', 'my-exporter']", "{{ $labels.uuid }}",
		"r.startsWith('example.com/mig-')", "name: example.com/mig-1g.5gb, ignoredByScheduler: false",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered with other names, the chart lacks %q", want)
		}
	}
	// Other names make another scheduler configuration, which rolls it.
	tmpl, _ := got["Deployment/vgpud-scheduler"]["spec"].(map[string]any)["template"].(map[string]any)
	ann, _ := tmpl["metadata"].(map[string]any)["annotations"].(map[string]any)
	if h, _ := ann["vgpud.io/scheduler-config"].(string); !regexp.MustCompile(`^[0-9a-f]{16}-[0-9a-f]{8}$`).MatchString(h) {
		t.Errorf("with other names the scheduler's config hash is %q; want the manifest's and a suffix of the names", h)
	}
	for _, key := range []string{"ServiceMonitor/vgpud", "PrometheusRule/vgpud", "Service/vgpud-metrics"} {
		if _, ok := got[key]; !ok {
			t.Errorf("monitoring enabled: no %s", key)
		}
	}
}

// No GPU agent but vgpud's own, and the pod network's namespace allowed
// to start without the hook: the lists the policies and the node read
// are the values, not the defaults.
func TestChartNamespaceListsAreTheValues(t *testing.T) {
	got := helmTemplate(t, "gpu-share", "--set-json=gpuAgentAccounts=[]", "runtimeHookOptionalNamespaces={calico-system}")
	raw, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, want := range []string{"orValue('') in ['vgpud']", `{"name":"VGPUD_GPU_AGENT_ACCOUNTS","value":"vgpud"}`,
		"request.namespace in ['gpu-share', 'calico-system']", "only pods in gpu-share, calico-system, and static pods",
		`{"name":"VGPUD_WEBHOOK_HOOK_OPTIONAL_NAMESPACES","value":"gpu-share,calico-system"}`} {
		if !strings.Contains(text, want) {
			t.Errorf("with gpuAgentAccounts empty and runtimeHookOptionalNamespaces={calico-system}, the chart lacks %q", want)
		}
	}
	if strings.Contains(text, "gpu-operator") || strings.Contains(text, "'kube-system'") || strings.Contains(text, "nvidia-dcgm") {
		t.Error("a namespace left out of the values is still exempt")
	}
}

// clusterSettings land in the ConfigMap's cluster-settings.yaml, which
// the leader reads: the same file format the flags' settings test reads.
func TestChartClusterSettingsAreTheFile(t *testing.T) {
	got := helmTemplate(t, "vgpud-system", "clusterSettings.nodePolicy=spread", "clusterSettings.defaultGPUCores=20")
	data, _ := got["ConfigMap/vgpud"]["data"].(map[string]any)
	if file, want := data["cluster-settings.yaml"], "version: v1\ndefaultGPUCores: 20\nnodePolicy: spread"; file != want {
		t.Errorf("the chart's cluster-settings.yaml is %q, want %q", file, want)
	}
}

// CRI-O's values mount its directory and name its file to the check.
func TestChartRuntimeIsTheValues(t *testing.T) {
	got := helmTemplate(t, "vgpud-system", "runtime.kind=cri-o", "runtime.configDir=/etc/crio")
	raw, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, want := range []string{`{"name":"VGPUD_RUNTIME_CONFIG","value":"cri-o:/etc/crio/crio.conf"}`,
		`{"mountPath":"/etc/crio","name":"runtime-config","readOnly":true}`, `"hostPath":{"path":"/etc/crio","type":"DirectoryOrCreate"}`} {
		if !strings.Contains(text, want) {
			t.Errorf("with runtime cri-o at /etc/crio, the chart lacks %s", want)
		}
	}
	if strings.Contains(text, "/etc/containerd") {
		t.Error("with runtime cri-o, the chart still mounts /etc/containerd")
	}
}

// A value that would change what a policy means, not what it names, is
// refused by the templates themselves, schema or not.
func TestChartRefusesValuesThatRewritePolicies(t *testing.T) {
	for _, tc := range []struct{ ns, set, want string }{
		{"vgpud-system", "schedulerName=x' || true || 'y", "schedulerName"},
		{"vgpud-system", "schedulerName=default-scheduler", "not default-scheduler"},
		{"vgpud-system", "resourceNames.gpumem=x' ].exists(n, false) || ['", "resourceNames.gpumem"},
		{"vgpud-system", "gpuAgentAccounts={a'b}", "want a ServiceAccount name"},
		{"vgpud-system", "runtimeHookOptionalNamespaces={a'b}", "want a namespace name"},
		{"vgpud-system", "exemptNamespaces={gpu-operator,dcgm}", "exemptNamespaces is gone: a namespace's name exempted whoever"},
		{"vgpud-system", "gpuAgentAccounts={nvidia-dcgm-exporter,default}", "gpuAgentAccounts lists default"},
		{"vgpud-system", "leaderNodes={gpu-1\\,x}", "not a node name"},
		{"kube-system", "schedulerName=vgpud-scheduler", "install it in a namespace of its own"},
		{"vgpud-system", "runtime.configDir=/etc/crio\\, type: File}", "runtime.configDir"},
		{"vgpud-system", "runtime.kind=docker", "runtime.kind"},
		{"vgpud-system", "clusterSettings.bindWait=1s", "clusterSettings.bindWait"},
		{"vgpud-system", "clusterSettings.nodePolicy=spread\n    x: y", "clusterSettings.nodePolicy"},
		{"vgpud-system", "runtime.configDir=/", "runtime.configDir"},
		{"vgpud-system", "runtime.configDir=/var/run/nri", "runtime.configDir"},
		{"vgpud-system", "runtime.configDir=/etc/../tmp", "runtime.configDir"},
	} {
		for _, schema := range []string{"", "--skip-schema-validation"} {
			set := []string{tc.set}
			if schema != "" {
				set = append(set, schema)
			}
			_, err := helmRender(t, tc.ns, set...)
			if err == nil || (schema != "" && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("-n %s --set %s %s: %v; want refused (%q)", tc.ns, tc.set, schema, err, tc.want)
			}
		}
	}
}

// nodeOverrides is the ConfigMap's node-overrides.yaml, entry for entry;
// a key no node entry takes is refused by the schema.
func TestChartNodeOverridesAreTheFile(t *testing.T) {
	got := helmTemplate(t, "vgpud-system", "nodeOverrides[0].name=gpu-a", "nodeOverrides[0].split=4",
		"nodeOverrides[1].selector.matchLabels.gpu=l4", "nodeOverrides[1].gpuUsage=enforce")
	data, _ := got["ConfigMap/vgpud"]["data"].(map[string]any)
	want := "version: v1\nnodes:\n- name: gpu-a\n  split: 4\n- gpuUsage: enforce\n  selector:\n    matchLabels:\n      gpu: l4\n"
	if file := data["node-overrides.yaml"]; file != want {
		t.Errorf("the chart's node-overrides.yaml is %q, want %q", file, want)
	}
	if def := helmTemplate(t, "vgpud-system"); def["ConfigMap/vgpud"]["data"].(map[string]any)["node-overrides.yaml"] != "version: v1\nnodes: []\n" {
		t.Errorf("by default, node-overrides.yaml is %q; want no entries", def["ConfigMap/vgpud"]["data"].(map[string]any)["node-overrides.yaml"])
	}
	if _, err := helmRender(t, "vgpud-system", "nodeOverrides[0].name=gpu-a", "nodeOverrides[0].splitt=4"); err == nil || !strings.Contains(err.Error(), "splitt") {
		t.Errorf("a misspelt key: %v; want the schema to refuse it", err)
	}
	// What the node's reader would refuse, and stop the node role for,
	// the schema refuses at install.
	for _, bad := range [][]string{
		{"nodeOverrides[0].split=4"},
		{"nodeOverrides[0].name=gpu-a", "nodeOverrides[0].selector.matchLabels.gpu=l4"},
		{"nodeOverrides[0].selector.matchlabels.gpu=l4"},
		{"nodeOverrides[0].selector.matchExpressions[0].key=gpu", "nodeOverrides[0].selector.matchExpressions[0].operator=Is"},
	} {
		if _, err := helmRender(t, "vgpud-system", bad...); err == nil {
			t.Errorf("nodeOverrides %v rendered; want the schema to refuse it", bad)
		}
	}
	// New entries roll the node pods, which read them at their start.
	ds, _ := json.Marshal(got["DaemonSet/vgpud"])
	if !strings.Contains(string(ds), `"checksum/node-overrides"`) {
		t.Error("the DaemonSet's pods carry no checksum of nodeOverrides: a helm upgrade would not roll them")
	}
}

// gpuUsage, imagePullSecrets, podLabels and podAnnotations reach the node
// pods; unset, they add nothing (TestChartRendersTheManifest).
func TestChartNodePodValues(t *testing.T) {
	got := helmTemplate(t, "vgpud-system", "gpuUsage=enforce", "imagePullSecrets[0].name=regcred", "podLabels.team=ml", "podAnnotations.example\\.com/owner=ml",
		"interposerDir=/usr/local/vgpu", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
		"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists", "global.imageRegistry=example.com")
	raw, err := json.Marshal(got["DaemonSet/vgpud"])
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, want := range []string{`{"name":"VGPUD_GPU_USAGE","value":"enforce"}`, `"imagePullSecrets":[{"name":"regcred"}]`, `"team":"ml"`, `"example.com/owner":"ml"`,
		`{"name":"VGPUD_INTERPOSER_DIR","value":"/usr/local/vgpu"}`, `{"mountPath":"/usr/local/vgpu","name":"interposer"}`, `"hostPath":{"path":"/usr/local/vgpu","type":"Directory"}`, `"affinity":{"nodeAffinity"`,
		`"app.kubernetes.io/component":"node"`, `"vgpud.io/runtime-hook-optional":"true"`} {
		if !strings.Contains(text, want) {
			t.Errorf("the DaemonSet lacks %s", want)
		}
	}
	for _, bad := range []string{"interposerDir=relative/dir", "interposerDir=/var/lib/vgpud", "interposerDir=/usr/../etc"} {
		if _, err := helmRender(t, "vgpud-system", bad); err == nil {
			t.Errorf("%s rendered; want the schema to refuse it (relative, or a path vgpud's pod mounts itself)", bad)
		}
	}
	if _, err := helmRender(t, "vgpud-system", "gpuUsage=always"); err == nil {
		t.Error("gpuUsage=always rendered; want the schema to refuse it")
	}
	sched, _ := json.Marshal(got["Deployment/vgpud-scheduler"])
	if !strings.Contains(string(sched), `"imagePullSecrets":[{"name":"regcred"}]`) {
		t.Error("the scheduler's Deployment lacks the image pull secrets")
	}
	// Labels the DaemonSet selects by, and vgpud's own keys, stay its.
	for _, bad := range []string{"podLabels.app\\.kubernetes\\.io/component=x", "podLabels.vgpud\\.io/role=leader", "podAnnotations.vgpud\\.io/runtime-hook-optional=false", "podAnnotations.checksum/node-overrides=x"} {
		if _, err := helmRender(t, "vgpud-system", bad); err == nil {
			t.Errorf("%s rendered; want the schema to refuse it", bad)
		}
	}
}

// The chart follows the cluster it is installed on: below 1.36, which
// serves no MutatingAdmissionPolicy v1, it is the manifest ForKubernetes
// makes for that version, object for object; the scheduler is the
// cluster's own version unless set.
func TestChartFollowsTheClusterVersion(t *testing.T) {
	for _, v := range []string{"v1.34.4", "v1.35.2"} {
		manifest, err := ForKubernetes(install, v)
		if err != nil {
			t.Fatal(err)
		}
		want := objects(t, manifest)
		delete(want, "Namespace/vgpud-system")
		got := withoutHooks(helmTemplate(t, "vgpud-system", "--kube-version="+v))
		for _, kind := range []string{"MutatingAdmissionPolicy/vgpud-gpu-pods", "MutatingAdmissionPolicyBinding/vgpud-gpu-pods"} {
			if _, ok := got[kind]; ok {
				t.Errorf("on %s the chart renders %s, which that apiserver does not serve", v, kind)
			}
		}
		if len(got) != len(want) {
			t.Errorf("on %s the chart renders %d objects, ForKubernetes's manifest %d", v, len(got), len(want))
		}
		for key, w := range want {
			if !reflect.DeepEqual(got[key], w) {
				gj, _ := json.Marshal(got[key])
				wj, _ := json.Marshal(w)
				t.Errorf("on %s, %s differs:\nchart:    %s\nmanifest: %s", v, key, gj, wj)
			}
		}
	}
	image := func(objs map[string]map[string]any) string {
		raw, _ := json.Marshal(objs["Deployment/vgpud-scheduler"])
		return regexp.MustCompile(`"image":"([^"]*)"`).FindStringSubmatch(string(raw))[1]
	}
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"--kube-version=v1.34.4+k3s1"}, "registry.k8s.io/kube-scheduler:v1.34.4"},
		{[]string{"--kube-version=v1.37.2-eks-1552ad0", "--api-versions=admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"}, "registry.k8s.io/kube-scheduler:v1.37.2"},
		{[]string{"scheduler.image=mirror.example.com/kube-scheduler:v1.36.1"}, "mirror.example.com/kube-scheduler:v1.36.1"},
	} {
		got := helmTemplate(t, "vgpud-system", tc.set...)
		if i := image(got); i != tc.want {
			t.Errorf("%v: the scheduler runs %q, want %q", tc.set, i, tc.want)
		}
		_, policy := got["MutatingAdmissionPolicy/vgpud-gpu-pods"]
		if want := !strings.Contains(tc.set[0], "1.34"); policy != want {
			t.Errorf("%v: the gpu-pods policy rendered %v, want %v", tc.set, policy, want)
		}
	}
	if _, err := helmRender(t, "vgpud-system", "--kube-version=v1.33.5"); err == nil || !strings.Contains(err.Error(), ">=1.34.0-0") {
		t.Errorf("on Kubernetes 1.33: %v; want the chart's kubeVersion to refuse it", err)
	}
	if _, err := ForKubernetes(install, "v1.33.5"); err == nil || !strings.Contains(err.Error(), "1.34 or newer") {
		t.Errorf("ForKubernetes on 1.33: %v; want refused", err)
	}
}

// vgpud's image is published nowhere: without image.repository the
// install stops with what to do, not at ImagePullBackOff.
func TestChartWantsTheImageSet(t *testing.T) {
	for _, set := range [][]string{{"image.repository="}, {"image.repository=", "--skip-schema-validation"}} {
		_, err := helmRender(t, "vgpud-system", set...)
		if err == nil || !strings.Contains(err.Error(), "make push IMAGE=") {
			t.Errorf("%v: %v; want refused with how to push the image", set, err)
		}
	}
}

// withoutHooks drops the Helm hooks' objects, which the manifest has no
// need of (TestChartLabelsTheNamespaceHelmMade).
func withoutHooks(objs map[string]map[string]any) map[string]map[string]any {
	for key, o := range objs {
		meta, _ := o["metadata"].(map[string]any)
		if ann, _ := meta["annotations"].(map[string]any); ann["helm.sh/hook"] != nil {
			delete(objs, key)
		}
	}
	return objs
}

// Where Helm made the namespace (--create-namespace) the chart's
// install hook puts the manifest's Namespace labels on it, with rights
// to that namespace alone; with namespace.create the Namespace carries
// them and there is no hook.
func TestChartLabelsTheNamespaceHelmMade(t *testing.T) {
	var ns struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	doc, err := Document("Namespace")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(doc), &ns); err != nil {
		t.Fatal(err)
	}
	var want []string
	for k, v := range ns.Metadata.Labels {
		want = append(want, "--label="+k+"="+v)
	}
	got := helmTemplate(t, "gpu-share")
	job, ok := got["Job/vgpud-namespace-labels"]
	if !ok {
		t.Fatal("no namespace-labels Job where Helm makes the namespace")
	}
	raw, _ := json.Marshal(job)
	var j struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Image string   `json:"image"`
						Args  []string `json:"args"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &j); err != nil {
		t.Fatal(err)
	}
	c := j.Spec.Template.Spec.Containers[0]
	args := append([]string(nil), c.Args[1:]...)
	slices.Sort(args)
	slices.Sort(want)
	if c.Args[0] != "namespace-labels" || !slices.Equal(args, want) {
		t.Errorf("the hook runs %v, want namespace-labels %v (the manifest Namespace's labels)", c.Args, want)
	}
	if j.Metadata.Annotations["helm.sh/hook"] != "pre-install,pre-upgrade" || c.Image != "ghcr.io/vgpud/vgpud:v0.2.0" {
		t.Errorf("hook %q image %q", j.Metadata.Annotations["helm.sh/hook"], c.Image)
	}
	role, _ := json.Marshal(got["ClusterRole/vgpud-namespace-labels-gpu-share"])
	if !strings.Contains(string(role), `{"apiGroups":[""],"resourceNames":["gpu-share"],"resources":["namespaces"],"verbs":["get","patch"]}`) ||
		!strings.Contains(string(role), `{"apiGroups":["vgpud.io"],"resourceNames":["gpu-share"],"resources":["gpuagents"],"verbs":["exempt"]}`) ||
		strings.Count(string(role), `"apiGroups"`) != 2 {
		t.Errorf("the hook's ClusterRole %s: want get and patch on namespace gpu-share, and exempt on gpuagents.vgpud.io gpu-share, alone", role)
	}
	for key := range helmTemplate(t, "gpu-share", "namespace.create=true") {
		if strings.Contains(key, "namespace-labels") {
			t.Errorf("with namespace.create the chart still renders %s", key)
		}
	}
}

// The hook's token may set vgpud's five namespace labels and nothing
// else: no owner (the garbage collector would delete the namespace), no
// finalizer, no annotation, no other label, no label removed.
func TestChartNamespaceHookIsHeldToItsLabels(t *testing.T) {
	got := helmTemplate(t, "gpu-share")
	raw, _ := json.Marshal(got["ValidatingAdmissionPolicy/vgpud-namespace-labels-gpu-share"])
	var p struct {
		Spec struct {
			MatchConditions []struct{ Expression string } `json:"matchConditions"`
			Variables       []struct{ Name, Expression string }
			Validations     []struct{ Expression string }
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &p); err != nil || len(p.Spec.Validations) != 1 {
		t.Fatalf("the hook's policy: %v %s", err, raw)
	}
	if _, ok := got["ValidatingAdmissionPolicyBinding/vgpud-namespace-labels-gpu-share"]; !ok || !strings.Contains(p.Spec.MatchConditions[0].Expression, "system:serviceaccount:gpu-share:vgpud-namespace-labels") {
		t.Fatalf("the hook's policy is not bound to its ServiceAccount: %s", raw)
	}
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType), cel.Variable("request", cel.DynType),
		cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)), cel.OptionalTypes())
	if err != nil {
		t.Fatal(err)
	}
	eval := func(expr string, act map[string]any) any {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("compile %s: %v", expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := prg.Eval(act)
		if err != nil {
			t.Fatalf("eval %s: %v", expr, err)
		}
		return out.Value()
	}
	ns := func(labels map[string]any, extra map[string]any) map[string]any {
		meta := map[string]any{"name": "gpu-share", "labels": labels}
		for k, v := range extra {
			meta[k] = v
		}
		return map[string]any{"metadata": meta}
	}
	old := ns(map[string]any{"kubernetes.io/metadata.name": "gpu-share"}, nil)
	want := map[string]any{"kubernetes.io/metadata.name": "gpu-share", "app.kubernetes.io/name": "vgpud", "vgpud.io/webhook": "ignore",
		"pod-security.kubernetes.io/enforce": "privileged", "pod-security.kubernetes.io/enforce-version": "latest", "vgpud.io/gpu-agents": "true"}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for a, b := range want {
			m[a] = b
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		new     map[string]any
		allowed bool
	}{
		{"the five labels", ns(want, nil), true},
		{"an owner", ns(want, map[string]any{"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "0"}}}), false},
		{"a finalizer", ns(want, map[string]any{"finalizers": []any{"example.com/hold"}}), false},
		{"an annotation", ns(want, map[string]any{"annotations": map[string]any{"a": "b"}}), false},
		{"another label", ns(with("team", "x"), nil), false},
		{"a baseline namespace", ns(with("pod-security.kubernetes.io/enforce", "baseline"), nil), false},
		{"a label removed", ns(with("kubernetes.io/metadata.name", nil), nil), false},
	} {
		act := map[string]any{"object": tc.new, "oldObject": old, "request": map[string]any{"operation": "UPDATE"}} // as the apiserver sends it: no subResource key
		vars := map[string]any{}
		for _, v := range p.Spec.Variables {
			act["variables"] = vars
			vars[v.Name] = eval(v.Expression, act)
		}
		act["variables"] = vars
		if got := eval(p.Spec.Validations[0].Expression, act) == true; got != tc.allowed {
			t.Errorf("%s: allowed %v, want %v", tc.name, got, tc.allowed)
		}
	}
}

// helm upgrade --reuse-values from a chart before GPU agents carries the
// old default exemptNamespaces=[gpu-operator] and no gpuAgentAccounts:
// it renders, with the GPU operator's agents, as a fresh install does.
func TestChartUpgradeReusingOldValuesKeepsTheAgents(t *testing.T) {
	fresh := helmTemplate(t, "vgpud-system")
	reused := helmTemplate(t, "vgpud-system", "exemptNamespaces={gpu-operator}", "gpuAgentAccounts=null")
	for _, key := range []string{"ValidatingAdmissionPolicy/vgpud-slice-env", "DaemonSet/vgpud"} {
		a, _ := json.Marshal(fresh[key])
		b, _ := json.Marshal(reused[key])
		if string(a) != string(b) {
			t.Errorf("%s differs with the old values reused:\n%s\n%s", key, a, b)
		}
	}
	raw, _ := json.Marshal(reused["ValidatingAdmissionPolicy/vgpud-slice-env"])
	if !strings.Contains(string(raw), "'nvidia-dcgm-exporter'") {
		t.Errorf("the reused values' policy lacks the GPU operator's agents: %s", raw)
	}
}

// extraEnv takes a setting as VGPUD_<FLAG> and GOMAXPROCS (vgpud runs on
// one P without it); any other name is refused.
func TestChartExtraEnv(t *testing.T) {
	got := helmTemplate(t, "vgpud-system", "extraEnv[0].name=VGPUD_SPLIT", "--set-string=extraEnv[0].value=4", "extraEnv[1].name=GOMAXPROCS", "--set-string=extraEnv[1].value=2")
	ds, _ := json.Marshal(got["DaemonSet/vgpud"])
	for _, want := range []string{`{"name":"VGPUD_SPLIT","value":"4"}`, `{"name":"GOMAXPROCS","value":"2"}`} {
		if !strings.Contains(string(ds), want) {
			t.Errorf("the DaemonSet has no %s", want)
		}
	}
	for _, bad := range []string{"LD_PRELOAD", "GOMAXPROCSX", "vgpud_split"} {
		if _, err := helmRender(t, "vgpud-system", "extraEnv[0].name="+bad, "extraEnv[0].value=x"); err == nil {
			t.Errorf("extraEnv %s rendered; want the schema to refuse it", bad)
		}
	}
	// --set reads 4 as a number, which the apiserver refuses in an env
	// value only when the DaemonSet is applied; the schema says so at
	// install, naming the value and the type it wants.
	_, err := helmRender(t, "vgpud-system", "extraEnv[0].name=VGPUD_SPLIT", "extraEnv[0].value=4")
	if err == nil || !strings.Contains(err.Error(), "/extraEnv/0/value") || !strings.Contains(err.Error(), "want string") {
		t.Errorf("extraEnv value 4 set as a number: got %v; want the schema to refuse it, naming /extraEnv/0/value and string", err)
	}
}
