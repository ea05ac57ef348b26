package manifests

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// The Helm chart's templates are generated from the files users apply:
// manifests/vgpud.yaml stays the one source and charts/vgpud only puts
// values where it names a namespace, a name, an image or a node choice.
// Each edit names the text it replaces and how often it occurs, so an
// edit of the manifest that moves one fails here rather than leaving the
// chart behind. `make chart` renders the chart and compares it with the
// manifest; VGPUD_UPDATE_DOCS=1 go test ./manifests/ writes the templates.

// edit replaces old, found exactly n times, with new.
type edit struct {
	old, new string
	n        int
}

const chartHeader = "# Generated from manifests/%s by manifests/chart_test.go: edit that file\n# and run VGPUD_UPDATE_DOCS=1 go test ./manifests/, never this one.\n"

// Env the DaemonSet gets only where a value differs from vgpud's
// defaults, so the default render is the manifest.
const chartEnv = `            - name: NVIDIA_DRIVER_CAPABILITIES
              value: utility
            {{- with .Values.gpuUsage }}
            - name: VGPUD_GPU_USAGE
              value: {{ . | quote }}
            {{- end }}
            {{- with .Values.interposerDir }}
            - name: VGPUD_INTERPOSER_DIR
              value: {{ . | quote }}
            {{- end }}
            {{- if ne .Values.schedulerName "vgpud-scheduler" }}
            - name: VGPUD_SCHEDULER_NAME
              value: {{ .Values.schedulerName | quote }}
            {{- end }}
            {{- if ne (include "vgpud.fullname" .) "vgpud" }}
            - name: VGPUD_WEBHOOK_CLAIM_DEVICE_CLASS
              value: {{ printf "%s-gpu" (include "vgpud.fullname" .) | quote }}
            {{- end }}
            {{- $optional := prepend (default (list) .Values.runtimeHookOptionalNamespaces) .Release.Namespace | join "," }}
            {{- if ne $optional "vgpud-system,kube-system,gpu-operator" }}
            - name: VGPUD_WEBHOOK_HOOK_OPTIONAL_NAMESPACES
              value: {{ $optional | quote }}
            {{- end }}
            {{- $agents := include "vgpud.gpuAgentAccounts" . | fromJsonArray | join "," }}
            {{- if ne $agents "vgpud,nvidia-dcgm-exporter,nvidia-dcgm,nvidia-gpu-feature-discovery,nvidia-operator-validator,nvidia-mig-manager" }}
            - name: VGPUD_GPU_AGENT_ACCOUNTS
              value: {{ $agents | quote }}
            {{- end }}
            {{- range $flag, $default := dict "GPU" "nvidia.com/gpu" "GPUMEM" "nvidia.com/gpumem" "GPUMEM_PERCENTAGE" "nvidia.com/gpumem-percentage" "GPUCORES" "nvidia.com/gpucores" "PRIORITY" "nvidia.com/priority" }}
            {{- $name := get $.Values.resourceNames ($flag | lower | camelcase | untitle) }}
            {{- if ne $name $default }}
            - name: VGPUD_RESOURCE_{{ $flag }}
              value: {{ $name | quote }}
            {{- end }}
            {{- end }}
            {{- $rt := include "vgpud.runtimeConfig" . }}
            {{- if ne $rt "containerd:/etc/containerd/config.toml" }}
            - name: VGPUD_RUNTIME_CONFIG
              value: {{ $rt | quote }}
            {{- end }}
            {{- $fullname := include "vgpud.fullname" . }}
            {{- if ne $fullname "vgpud" }}
            # The objects the binary finds by name, under the chart's.
            - name: VGPUD_LEASE_NAME
              value: {{ printf "%s-leader" $fullname | quote }}
            - name: VGPUD_TLS_SECRET_NAME
              value: {{ printf "%s-tls" $fullname | quote }}
            - name: VGPUD_WEBHOOK_CONFIG_NAME
              value: {{ $fullname | quote }}
            - name: VGPUD_SERVICE_NAME
              value: {{ $fullname | quote }}
            - name: VGPUD_SCHEDULER_DEPLOYMENT
              value: {{ printf "%s-scheduler" $fullname | quote }}
            {{- end }}
            {{- with .Values.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
`

// daemonSetPlacement is where the manifest puts vgpud's pods, which the
// chart's nodeSelector, affinity and tolerations say (values.yaml's
// affinity is the manifest's).
const daemonSetPlacement = `      # GPU nodes, by any of: Node Feature Discovery's label for an NVIDIA
      # PCI device (vendor 10de, as the GPU Operator sets NFD up), GPU
      # feature discovery's, or vgpud.io/gpu=true put on by hand where
      # neither runs. Edit to select yours.
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions: [{key: feature.node.kubernetes.io/pci-10de.present, operator: In, values: ["true"]}]
              - matchExpressions: [{key: nvidia.com/gpu.present, operator: In, values: ["true"]}]
              - matchExpressions: [{key: vgpud.io/gpu, operator: In, values: ["true"]}]
      tolerations:
        - key: nvidia.com/gpu
          operator: Exists
          effect: NoSchedule
        - key: CriticalAddonsOnly
          operator: Exists
      # The node's runtime set up`

// gpuPodsPolicyIf opens what only a cluster serving
// MutatingAdmissionPolicy v1 gets (helm template: --api-versions
// admissionregistration.k8s.io/v1/MutatingAdmissionPolicy).
const gpuPodsPolicyIf = `{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" }}`

// schedulerDefaults is what the scheduler's configuration is made of
// with the chart's defaults, as its template prints it.
const schedulerDefaults = `vgpud-system|vgpud-scheduler|{"gpu":"nvidia.com/gpu","gpucores":"nvidia.com/gpucores","gpumem":"nvidia.com/gpumem","gpumemPercentage":"nvidia.com/gpumem-percentage","priority":"nvidia.com/priority"}|vgpud`

func installEdits() []edit {
	res := func(name, key string) []edit {
		return []edit{
			{"'" + name + "'", "'{{ .Values.resourceNames." + key + " }}'", 25},
			{"{name: " + name + ",", "{name: {{ .Values.resourceNames." + key + " }},", 1},
		}
	}
	edits := []edit{
		// The chart leaves the namespace to Helm (--create-namespace)
		// unless asked; its labels are the manifest's.
		{"apiVersion: v1\nkind: Namespace\n", "{{- if .Values.namespace.create }}\napiVersion: v1\nkind: Namespace\n", 1},
		{"    pod-security.kubernetes.io/enforce-version: latest\n---\n", "    pod-security.kubernetes.io/enforce-version: latest\n{{- end }}\n---\n", 1},
		{"vgpud-system", "{{ .Release.Namespace }}", 52},
		// Pods that may start without vgpud's hook: vgpud's and those
		// that start before it (the pod network's).
		{"request.namespace in ['{{ .Release.Namespace }}', 'kube-system', 'gpu-operator']",
			"request.namespace in [{{ range $i, $n := prepend (default (list) .Values.runtimeHookOptionalNamespaces) .Release.Namespace }}{{ if $i }}, {{ end }}'{{ $n }}'{{ end }}]", 3},
		{"only pods in {{ .Release.Namespace }}, kube-system, gpu-operator, and static pods",
			"only pods in {{ prepend (default (list) .Values.runtimeHookOptionalNamespaces) .Release.Namespace | join \", \" }}, and static pods", 1},
		// The scheduler profile's name, not its Deployment's, which is
		// fixed.
		{"object.spec.schedulerName == 'vgpud-scheduler'", "object.spec.schedulerName == '{{ .Values.schedulerName }}'", 1},
		{"'default-scheduler', 'vgpud-scheduler']", "'default-scheduler', '{{ .Values.schedulerName }}']", 1},
		{"schedulerName: 'vgpud-scheduler',\n", "schedulerName: '{{ .Values.schedulerName }}',\n", 1},
		{"only vgpud-scheduler places", "only {{ .Values.schedulerName }} places", 1},
		{"get schedulerName vgpud-scheduler from", "get schedulerName {{ .Values.schedulerName }} from", 1},
		{"kube-scheduler profile, vgpud-scheduler, whose", "kube-scheduler profile, {{ .Values.schedulerName }}, whose", 1},
		{"      - schedulerName: vgpud-scheduler\n", "      - schedulerName: {{ .Values.schedulerName }}\n", 1},
		// The GPU agents exempt from the slice's env, as the node's.
		{"object.spec.?serviceAccountName.orValue('') in ['vgpud', 'nvidia-dcgm-exporter', 'nvidia-dcgm', 'nvidia-gpu-feature-discovery', 'nvidia-operator-validator', 'nvidia-mig-manager']",
			"object.spec.?serviceAccountName.orValue('') in [{{ range $i, $n := include \"vgpud.gpuAgentAccounts\" . | fromJsonArray }}{{ if $i }}, {{ end }}'{{ $n }}'{{ end }}]", 1},
		{`  leader-nodes: ""`, `  leader-nodes: {{ .Values.leaderNodes | join "," | quote }}`, 1},
		{"          image: ghcr.io/vgpud/vgpud:v0.2.0\n          imagePullPolicy: IfNotPresent\n",
			"          image: {{ include \"vgpud.image\" . }}\n          imagePullPolicy: {{ .Values.image.pullPolicy }}\n", 2},
		{"      priorityClassName: system-node-critical\n      runtimeClassName: nvidia\n",
			"      priorityClassName: {{ .Values.priorityClassName }}\n      {{- with .Values.runtimeClassName }}\n      runtimeClassName: {{ . }}\n      {{- end }}\n", 1},
		{daemonSetPlacement,
			"      {{- with .Values.nodeSelector }}\n      nodeSelector:\n        {{- toYaml . | nindent 8 }}\n      {{- end }}\n      {{- with .Values.affinity }}\n      affinity:\n        {{- toYaml . | nindent 8 }}\n      {{- end }}\n      tolerations:\n        {{- toYaml .Values.tolerations | nindent 8 }}\n      {{- if .Values.nodeSetup.enabled }}\n      # The node's runtime set up", 1},
		// The node setup: on unless turned off, for the runtime the values
		// name, restarted as they say.
		{"            - {name: nri, mountPath: /var/run/nri, readOnly: true}\n      containers:\n", "            - {name: nri, mountPath: /var/run/nri, readOnly: true}\n      {{- end }}\n      containers:\n", 1},
		{"        - name: runtime-socket\n          hostPath: {path: /run/containerd, type: DirectoryOrCreate}\n", "        {{- if .Values.nodeSetup.enabled }}\n        - name: runtime-socket\n          hostPath: {path: {{ include \"vgpud.runtimeSocket\" . | dir }}, type: DirectoryOrCreate}\n        {{- end }}\n", 1},
		// HAMi-core's interposer, where the operator put it on the nodes:
		// mounted at the same path, which the hook mounts into GPU
		// containers, read-write for the ld.so.preload vgpud writes there.
		{"            - {name: tmp, mountPath: /tmp}\n      volumes:\n", "            - {name: tmp, mountPath: /tmp}\n            {{- with .Values.interposerDir }}\n            - {name: interposer, mountPath: {{ . }}}\n            {{- end }}\n      volumes:\n", 1},
		{"        - name: run\n          emptyDir: {}\n", "        - name: run\n          emptyDir: {}\n        {{- with .Values.interposerDir }}\n        - name: interposer\n          hostPath: {path: {{ . }}, type: Directory}\n        {{- end }}\n", 1},
		{"            - name: NVIDIA_DRIVER_CAPABILITIES\n              value: utility\n", chartEnv, 1},
		// The node pods' own labels and annotations, and the secrets to
		// pull vgpud's image with.
		{"      labels:\n        app.kubernetes.io/name: vgpud\n        app.kubernetes.io/component: node\n      annotations:\n",
			"      labels:\n        app.kubernetes.io/name: vgpud\n        app.kubernetes.io/component: node\n        {{- with .Values.podLabels }}\n        {{- toYaml . | nindent 8 }}\n        {{- end }}\n      annotations:\n        {{- with .Values.podAnnotations }}\n        {{- toYaml . | nindent 8 }}\n        {{- end }}\n        {{- with .Values.nodeOverrides }}\n        # Each replica reads its overrides at its start: new ones roll it.\n        checksum/node-overrides: {{ toJson . | sha256sum | trunc 16 | quote }}\n        {{- end }}\n", 1},
		{"      serviceAccountName: vgpud\n", "      serviceAccountName: vgpud\n      {{- with .Values.imagePullSecrets }}\n      imagePullSecrets:\n        {{- toYaml . | nindent 8 }}\n      {{- end }}\n", 1},
		{"      serviceAccountName: vgpud-scheduler\n", "      serviceAccountName: vgpud-scheduler\n      {{- with .Values.imagePullSecrets }}\n      imagePullSecrets:\n        {{- toYaml . | nindent 8 }}\n      {{- end }}\n", 1},
		{"            httpGet: {path: /readyz, port: metrics, scheme: HTTPS}\n            periodSeconds: 5\n            timeoutSeconds: 5\n          resources:\n            requests: {cpu: 50m, memory: 64Mi}\n            limits: {memory: 512Mi}\n",
			"            httpGet: {path: /readyz, port: metrics, scheme: HTTPS}\n            periodSeconds: 5\n            timeoutSeconds: 5\n          resources:\n            {{- toYaml .Values.resources | nindent 12 }}\n", 1},
		// The stock kube-scheduler of the cluster's version, unless set.
		{"          image: " + manifestSchedulerImage + "\n", "          image: {{ .Values.scheduler.image | default (printf \"registry.k8s.io/kube-scheduler:%s\" (regexFind \"^v[0-9]+\\\\.[0-9]+\\\\.[0-9]+\" .Capabilities.KubeVersion.Version)) }}\n", 1},
		// MutatingAdmissionPolicy v1 where the cluster serves it (1.36+);
		// before, the webhook admits GPU pods alone. The manifest for such
		// a cluster is ForKubernetes's.
		{"apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicy\n", gpuPodsPolicyIf + "\napiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicy\n", 2},
		{"\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicyBinding\n", "\n{{- end }}\n---\n" + gpuPodsPolicyIf + "\napiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicyBinding\n", 2},
		{"values: [\"ignore\"]}\n---\n# Marks each pod", "values: [\"ignore\"]}\n{{- end }}\n---\n# Marks each pod", 1},
		{"values: [\"ignore\"]}\n---\n# Follows the leader", "values: [\"ignore\"]}\n{{- end }}\n---\n# Follows the leader", 1},
		{"{name: runtime-config, mountPath: /etc/containerd, readOnly: true}", "{name: runtime-config, mountPath: {{ .Values.runtime.configDir }}, readOnly: true}", 1},
		{"  node-overrides.yaml: |\n    version: v1\n    nodes: []\n", "  node-overrides.yaml: |\n    version: v1\n    nodes:{{ if .Values.nodeOverrides }}\n    {{- toYaml .Values.nodeOverrides | nindent 4 }}\n    {{- else }} []\n    {{- end }}\n", 1},
		{"  cluster-settings.yaml: |\n    version: v1\n", "  cluster-settings.yaml: |\n    version: v1\n    {{- with .Values.clusterSettings }}\n    {{- toYaml . | nindent 4 }}\n    {{- end }}\n", 1},
		{"hostPath: {path: /etc/containerd, type: DirectoryOrCreate}", "hostPath: {path: {{ .Values.runtime.configDir }}, type: DirectoryOrCreate}", 1},
	}
	edits = append(edits, nodeSetupContainerEdits("install")...)
	// The policies a removal leaves (kubernetes#130887): rendered unless
	// they are there already and not this release's (left by the
	// manifest's removal, or another release's), which a helm install
	// could not take over; kept either way.
	edits = append(edits,
		edit{"apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: vgpud-keep-lease-params\n",
			`{{- $kept := lookup "admissionregistration.k8s.io/v1" "ValidatingAdmissionPolicyBinding" "" (printf "%s-keep-lease-params" (include "vgpud.fullname" .)) }}` + "\n" +
				`{{- if or (not $kept) (eq (printf "%s/%s" (dig "metadata" "annotations" "meta.helm.sh/release-namespace" "" $kept) (dig "metadata" "annotations" "meta.helm.sh/release-name" "" $kept)) (printf "%s/%s" .Release.Namespace .Release.Name)) }}` + "\n" +
				"apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: vgpud-keep-lease-params\n", 1},
		edit{"\n---\n# Every change of the leader Lease's holder", "\n{{- end }}\n---\n# Every change of the leader Lease's holder", 1})
	edits = append(edits, res("nvidia.com/gpumem-percentage", "gpumemPercentage")...)
	edits = append(edits, res("nvidia.com/gpumem", "gpumem")...)
	edits = append(edits, res("nvidia.com/gpucores", "gpucores")...)
	edits = append(edits, res("nvidia.com/gpu", "gpu")...)
	edits = append(edits, edit{"{name: nvidia.com/priority,", "{name: {{ .Values.resourceNames.priority }},", 1})
	// The per-profile MIG resources: the GPU resource's domain, then
	// "/mig-" (wellknown.ResourceNames.MIGPrefix).
	mig := `{{ index (splitList "/" .Values.resourceNames.gpu) 0 }}/mig-`
	edits = append(edits, edit{"'nvidia.com/'", "'" + `{{ index (splitList "/" .Values.resourceNames.gpu) 0 }}/` + "'", 16})
	edits = append(edits, edit{"'nvidia.com/mig-'", "'" + mig + "'", 10}, edit{"{name: nvidia.com/mig-", "{name: " + mig, len(wellknown.MIGProfiles())})
	// The scheduler's configuration names the namespace, the scheduler,
	// the resources and the Service and Lease by the chart's name: where those are not the defaults, its hash
	// grows a suffix of them, so that changing them rolls the scheduler.
	hash := regexp.MustCompile(`vgpud.io/scheduler-config: "([0-9a-f]+)"`).FindStringSubmatch(install)
	if hash != nil {
		edits = append(edits, edit{hash[0], `vgpud.io/scheduler-config: "` + hash[1] + `{{ $in := printf "%s|%s|%s|%s" .Release.Namespace .Values.schedulerName (toJson .Values.resourceNames) (include "vgpud.fullname" .) }}{{ if ne $in ` + "`" + schedulerDefaults + "`" + ` }}-{{ $in | sha256sum | trunc 8 }}{{ end }}"`, 1})
	}
	return edits
}

// revertEdits make charts/vgpud's pre-delete hook of
// manifests/node-revert.yaml: the chart's namespace, image and runtime
// paths (Helm 3 does not post-render hooks), Helm's hook annotations.
func revertEdits() []edit {
	hook := func(weight string) string {
		return "  labels:\n    app.kubernetes.io/name: vgpud\n  annotations:\n    helm.sh/hook: pre-delete\n    helm.sh/hook-weight: \"" + weight + "\"\n    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded\nspec:\n"
	}
	return append(nodeSetupContainerEdits("remove"), []edit{
		{"vgpud-system", "{{ .Release.Namespace }}", 3},
		{"          image: ghcr.io/vgpud/vgpud:v0.2.0\n          imagePullPolicy: IfNotPresent\n",
			"          image: {{ include \"vgpud.image\" . }}\n          imagePullPolicy: {{ .Values.image.pullPolicy }}\n", 3},
		{"hostPath: {path: /etc/containerd, type: DirectoryOrCreate}", "hostPath: {path: {{ .Values.runtime.configDir }}, type: DirectoryOrCreate}", 1},
		{"hostPath: {path: /run/containerd, type: DirectoryOrCreate}", "hostPath: {path: {{ include \"vgpud.runtimeSocket\" . | dir }}, type: DirectoryOrCreate}", 1},
		{"      priorityClassName: system-node-critical\n", "      priorityClassName: {{ .Values.priorityClassName }}\n", 1},
		{`args: ["node-setup", "--wait-timeout=4m", "wait-reverted"]`, `args: ["node-setup", "--wait-timeout={{ .Values.nodeSetup.revertTimeout }}", "wait-reverted"]`, 1},
		{"  activeDeadlineSeconds: 285\n", "  activeDeadlineSeconds: {{ include \"vgpud.revertDeadline\" . }}\n", 1},
		{"  name: vgpud-node-revert\n  namespace: {{ .Release.Namespace }}\n  labels:\n    app.kubernetes.io/name: vgpud\nspec:\n  selector:",
			"  name: vgpud-node-revert\n  namespace: {{ .Release.Namespace }}\n" + hook("-10") + "  selector:", 1},
		{"  name: vgpud-node-revert\n  namespace: {{ .Release.Namespace }}\n  labels:\n    app.kubernetes.io/name: vgpud\nspec:\n  backoffLimit:",
			"  name: vgpud-node-revert\n  namespace: {{ .Release.Namespace }}\n" + hook("0") + "  backoffLimit:", 1},
		{"      serviceAccountName: vgpud\n", "      serviceAccountName: vgpud\n      {{- with .Values.imagePullSecrets }}\n      imagePullSecrets:\n        {{- toYaml . | nindent 8 }}\n      {{- end }}\n", 2},
	}...)
}

// nodeSetupContainerEdits give the privileged node-setup container
// (vgpud.yaml's init container running action install, node-revert.yaml's
// running remove) the runtime the values name and the restart they ask.
func nodeSetupContainerEdits(action string) []edit {
	return []edit{
		{`args: ["node-setup", "--node=$(NODE_NAME)", "--restart=signal", "--runtime-socket=/run/containerd/containerd.sock", "--runtime-config=containerd:/etc/containerd/config.toml", "--lease=vgpud-node-setup", "` + action + `"]`,
			`args: ["node-setup", "--node=$(NODE_NAME)", "--restart={{ include "vgpud.nodeSetupRestart" . }}", "--runtime-socket={{ include "vgpud.runtimeSocket" . }}", {{ include "vgpud.runtimeConfig" . | printf "--runtime-config=%s" | quote }}, "--lease=vgpud-node-setup", "` + action + `"]`, 1},
		{"{name: runtime-config, mountPath: /etc/containerd}", "{name: runtime-config, mountPath: {{ .Values.runtime.configDir }}}", 1},
		{"{name: runtime-socket, mountPath: /run/containerd, readOnly: true}", "{name: runtime-socket, mountPath: {{ include \"vgpud.runtimeSocket\" . | dir }}, readOnly: true}", 1},
	}
}

// monitoringTemplate wraps the Prometheus Operator's files in the
// chart's switches; the alerts' own {{ }} reach Prometheus unexpanded.
func monitoringTemplate(t *testing.T) string {
	t.Helper()
	read := func(name string) string {
		raw, err := os.ReadFile("monitoring/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	verbatim := strings.NewReplacer("{{", "{{`{{`}}", "}}", "{{`}}`}}")
	sm := strings.ReplaceAll(read("servicemonitor.yaml"), "vgpud-system", "{{ .Release.Namespace }}")
	sm = strings.Replace(sm, "kind: ServiceMonitor\nmetadata:\n  name: vgpud\n  namespace: {{ .Release.Namespace }}\n  labels:\n    app.kubernetes.io/name: vgpud\n",
		"kind: ServiceMonitor\nmetadata:\n  name: vgpud\n  namespace: {{ .Release.Namespace }}\n  labels:\n    app.kubernetes.io/name: vgpud\n    {{- with .Values.monitoring.labels }}\n    {{- toYaml . | nindent 4 }}\n    {{- end }}\n", 1)
	// The alerts' prose names the namespace and a resource too.
	pr := strings.NewReplacer("vgpud-system", "{{ .Release.Namespace }}", "nvidia.com/gpumem", "{{ .Values.resourceNames.gpumem }}").Replace(verbatim.Replace(read("prometheusrule.yaml")))
	pr = strings.Replace(pr, "  labels:\n    app.kubernetes.io/name: vgpud\n",
		"  labels:\n    app.kubernetes.io/name: vgpud\n    {{- with .Values.monitoring.labels }}\n    {{- toYaml . | nindent 4 }}\n    {{- end }}\n", 1)
	return "{{- if .Values.monitoring.serviceMonitor }}\n" + sm + "{{- end }}\n---\n{{- if .Values.monitoring.prometheusRule }}\n" + pr + "{{- end }}\n"
}

func TestChartTemplatesAreGenerated(t *testing.T) {
	tmpl := install
	for _, e := range installEdits() {
		if n := strings.Count(tmpl, e.old); n != e.n {
			t.Fatalf("manifests/vgpud.yaml has %q %d times, the chart's edit expects %d: update installEdits", e.old, n, e.n)
		}
		tmpl = strings.ReplaceAll(tmpl, e.old, e.new)
	}
	tmpl = chartNames(t, "vgpud.yaml", tmpl)
	revert := NodeRevert
	for _, e := range revertEdits() {
		if n := strings.Count(revert, e.old); n != e.n {
			t.Fatalf("manifests/node-revert.yaml has %q %d times, the chart's edit expects %d: update revertEdits", e.old, n, e.n)
		}
		revert = strings.ReplaceAll(revert, e.old, e.new)
	}
	revert = chartNames(t, "node-revert.yaml", revert)
	want := map[string]string{
		"../charts/vgpud/templates/node-revert.yaml": strings.Replace(chartHeader, "%s", "node-revert.yaml", 1) + revert,
		"../charts/vgpud/templates/vgpud.yaml":       strings.Replace(chartHeader, "%s", "vgpud.yaml", 1) + "{{- include \"vgpud.validate\" . }}\n" + tmpl,
		"../charts/vgpud/templates/monitoring.yaml":  strings.Replace(chartHeader, "%s", "monitoring/", 1) + chartNames(t, "monitoring/", monitoringTemplate(t)),
	}
	for path, body := range want {
		if os.Getenv("VGPUD_UPDATE_DOCS") != "" {
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != body {
			t.Errorf("%s is not generated from manifests/: run VGPUD_UPDATE_DOCS=1 go test ./manifests/", path)
		}
	}
}
