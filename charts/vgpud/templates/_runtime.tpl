{{/*
vgpud.runtimeConfig is --runtime-config as the values name the runtime:
KIND:DIR/FILE, the main file of containerd or CRI-O in runtime.configDir.
Not generated: the node role's container and the node setup's share it.
*/}}
{{- define "vgpud.runtimeConfig" -}}
{{ printf "%s:%s/%s" .Values.runtime.kind .Values.runtime.configDir (eq .Values.runtime.kind "cri-o" | ternary "crio.conf" "config.toml") }}
{{- end -}}
