{{/*
vgpud.image is vgpud's image as the values name it: by digest where one
is given, else by tag (the chart's appVersion when empty). Not
generated: the DaemonSet (manifests/chart_test.go puts the call there)
and the namespace hook's Job share it.
*/}}
{{- define "vgpud.image" -}}
{{ printf "%s%s" .Values.image.repository (ternary (printf "@%s" .Values.image.digest) (printf ":%s" (.Values.image.tag | default .Chart.AppVersion)) (ne .Values.image.digest "")) }}
{{- end -}}
