{{/*
vgpud.revertDeadline is the revert Job's activeDeadlineSeconds:
nodeSetup.revertTimeout (the wait pod's own timeout, a duration such as
4m or 1h30m, as the schema allows) in seconds, plus 45. A wait pod that
lives names the nodes left at its timeout, first; a replaced one starts
its timeout again, and this bounds the whole Job. Keep its 45 in step
with node-revert.yaml's 285 (4m + 45 s), under Helm's 5-minute default.
*/}}
{{- define "vgpud.revertDeadline" -}}
{{- $s := 45 -}}
{{- range regexFindAll "[0-9]+[smh]" .Values.nodeSetup.revertTimeout -1 -}}
{{- $n := regexFind "[0-9]+" . | atoi -}}
{{- if hasSuffix "h" . -}}{{- $s = add $s (mul $n 3600) -}}
{{- else if hasSuffix "m" . -}}{{- $s = add $s (mul $n 60) -}}
{{- else -}}{{- $s = add $s $n -}}{{- end -}}
{{- end -}}
{{- $s -}}
{{- end -}}
