{{/*
vgpud.gpuAgentAccounts are the ServiceAccounts whose pods keep every GPU
in a namespace labelled vgpud.io/gpu-agents=true, as a JSON list: the
chart's own (vgpud's node pods read every GPU), then gpuAgentAccounts.
The node's --gpu-agent-accounts and the vgpud-slice-env policy both read
it. Not generated.
*/}}
{{- define "vgpud.gpuAgentAccounts" -}}
{{- /* Absent (helm upgrade --reuse-values from a chart without it):
the GPU operator's agents, this chart's default. */ -}}
{{- $accounts := list "nvidia-dcgm-exporter" "nvidia-dcgm" "nvidia-gpu-feature-discovery" "nvidia-operator-validator" "nvidia-mig-manager" -}}
{{- if hasKey .Values "gpuAgentAccounts" -}}
{{- $accounts = default (list) .Values.gpuAgentAccounts -}}
{{- end -}}
{{ prepend $accounts (include "vgpud.fullname" .) | uniq | toJson }}
{{- end -}}
