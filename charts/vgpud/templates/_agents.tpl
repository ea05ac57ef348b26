{{/*
vgpud.gpuAgentAccounts are the ServiceAccounts whose pods keep every GPU
in a namespace labelled vgpud.io/gpu-agents=true, as a JSON list: the
chart's own (vgpud's node pods read every GPU), then gpuAgentAccounts.
The node's --gpu-agent-accounts and the vgpud-slice-env policy both read
it. Not generated.
*/}}
{{- define "vgpud.gpuAgentAccounts" -}}
{{ prepend (default (list) .Values.gpuAgentAccounts) (include "vgpud.fullname" .) | uniq | toJson }}
{{- end -}}
