{{/*
vgpud.validate fails the render on a value that would change what the
admission policies mean rather than what they name: values reach CEL
strings, so each is held to the shape of a name here too, even with
--skip-schema-validation. Not generated: manifests/chart_test.go puts the
call at the top of vgpud.yaml.
*/}}
{{- define "vgpud.validate" -}}
{{- if not .Values.image.repository -}}
{{- fail "image.repository is not set: vgpud is published to no registry. Build and push it from a clone (make push IMAGE=registry.example.com/gpu/vgpud:v0.2.0), then install with --set image.repository=registry.example.com/gpu/vgpud --set image.digest=<the sha256:... it printed>" -}}
{{- end -}}
{{- $label := "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" -}}
{{- $resource := "^([a-z0-9]([-a-z0-9]*[a-z0-9])?\\.)+[a-z]{2,}/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$" -}}
{{- $node := "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$" -}}
{{- if has .Release.Namespace (list "default" "kube-system" "kube-public" "kube-node-lease") -}}
{{- fail (printf "namespace %s: vgpud's namespace is exempt from its own policies; install it in a namespace of its own (--namespace vgpud-system)" .Release.Namespace) -}}
{{- end -}}
{{- range $key := list "nameOverride" "fullnameOverride" -}}
{{- $v := get $.Values $key | default "" -}}
{{- if and $v (or (not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $v)) (gt (len $v) 40)) -}}
{{- fail (printf "%s %q: want a name of at most 40 lower-case letters, digits and dashes, starting with a letter: it names every object of vgpud's (its Service among them), with suffixes such as -leader" $key $v) -}}
{{- end -}}
{{- end -}}
{{- if or (not (regexMatch $label .Values.schedulerName)) (eq .Values.schedulerName "default-scheduler") -}}
{{- fail (printf "schedulerName %q: want a name of vgpud's own kube-scheduler profile (lower-case letters, digits, dashes), not default-scheduler" .Values.schedulerName) -}}
{{- end -}}
{{- range $key, $name := .Values.resourceNames -}}
{{- if not (regexMatch $resource $name) -}}
{{- fail (printf "resourceNames.%s %q: want an extended resource name, domain/name" $key $name) -}}
{{- end -}}
{{- end -}}
{{- /* The old default, carried by helm upgrade --reuse-values, says
nothing gpuAgentAccounts' defaults do not; any other list is a choice
that must be made again. */ -}}
{{- if and .Values.exemptNamespaces (ne (toJson .Values.exemptNamespaces) "[\"gpu-operator\"]") -}}
{{- fail "exemptNamespaces is gone: a namespace's name exempted whoever could make a namespace of that name. Label each namespace of GPU agents vgpud.io/gpu-agents=true (kubectl label namespace NAME vgpud.io/gpu-agents=true, as a cluster admin), list their ServiceAccounts in gpuAgentAccounts, and upgrade without exemptNamespaces (with --reuse-values: --reset-then-reuse-values, or --set exemptNamespaces=null) (docs/security-tenants.md)" -}}
{{- end -}}
{{- range $ns := default (list) .Values.runtimeHookOptionalNamespaces -}}
{{- if not (regexMatch $label $ns) -}}
{{- fail (printf "namespace %q in runtimeHookOptionalNamespaces: want a namespace name" $ns) -}}
{{- end -}}
{{- end -}}
{{- if has "default" (default (list) .Values.gpuAgentAccounts) -}}
{{- fail "gpuAgentAccounts lists default, the ServiceAccount of every pod that names none: it would make every pod of a labelled namespace a GPU agent; give the agent a ServiceAccount of its own" -}}
{{- end -}}
{{- range $sa := default (list) .Values.gpuAgentAccounts -}}
{{- if or (not (regexMatch "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$" $sa)) (gt (len $sa) 253) -}}
{{- fail (printf "ServiceAccount %q in gpuAgentAccounts: want a ServiceAccount name" $sa) -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := default (dict) .Values.clusterSettings -}}
{{- if not (has $k (list "nodePolicy" "gpuPolicy" "defaultGPUMemPercentage" "defaultGPUCores")) -}}
{{- fail (printf "clusterSettings.%s: want nodePolicy, gpuPolicy, defaultGPUMemPercentage, defaultGPUCores" $k) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]+(,[a-z0-9]+)*$" (toString $v)) -}}
{{- fail (printf "clusterSettings.%s %q: want a policy name or a number" $k (toString $v)) -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.runtime.kind (list "containerd" "cri-o")) -}}
{{- fail (printf "runtime.kind %q: want containerd or cri-o" .Values.runtime.kind) -}}
{{- end -}}
{{- if or (not (regexMatch "^/[A-Za-z0-9._/-]*[A-Za-z0-9._-]$" .Values.runtime.configDir)) (regexMatch "^/(tmp|run/vgpud|var/run/nri|run/nri|etc/vgpud|var/lib/kubelet|proc|sys|dev|usr|bin|sbin|lib|lib64)(/|$)" .Values.runtime.configDir) (regexMatch "(^|/)\\.\\.?(/|$)" .Values.runtime.configDir) -}}
{{- fail (printf "runtime.configDir %q: want the runtime's configuration directory, such as /etc/containerd or /etc/crio (not /, nor a path vgpud's container uses itself)" .Values.runtime.configDir) -}}
{{- end -}}
{{- range $n := default (list) .Values.leaderNodes -}}
{{- if not (regexMatch $node $n) -}}
{{- fail (printf "leaderNodes: %q is not a node name" $n) -}}
{{- end -}}
{{- end -}}
{{- end -}}
