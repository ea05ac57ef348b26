{{/*
vgpud.runtimeConfig is --runtime-config as the values name the runtime:
KIND:DIR/FILE, the main file of containerd or CRI-O in runtime.configDir.
Not generated: the node role's container and the node setup's share it.
*/}}
{{- define "vgpud.runtimeConfig" -}}
{{ printf "%s:%s/%s" .Values.runtime.kind .Values.runtime.configDir (eq .Values.runtime.kind "cri-o" | ternary "crio.conf" "config.toml") }}
{{- end -}}

{{/*
vgpud.runtimeSocket is the runtime's API socket: runtime.socket, else
the runtime kind's own.
*/}}
{{- define "vgpud.runtimeSocket" -}}
{{ .Values.runtime.socket | default (eq .Values.runtime.kind "cri-o" | ternary "/var/run/crio/crio.sock" "/run/containerd/containerd.sock") }}
{{- end -}}

{{/*
vgpud.nodeSetupRestart is how the node setup restarts the runtime:
nodeSetup.restart, else signal for containerd, whose systemd unit starts
it again after it exits (Restart=always), and none for CRI-O, whose
unit's Restart= varies.
*/}}
{{- define "vgpud.nodeSetupRestart" -}}
{{ .Values.nodeSetup.restart | default (eq .Values.runtime.kind "cri-o" | ternary "none" "signal") }}
{{- end -}}
