{{/*
vgpud.name is the app.kubernetes.io/name of vgpud's objects: nameOverride,
else vgpud. vgpud.fullname names them all (the Lease, the policies, the
ClusterRoles, the Service...), with a suffix where there are several:
fullnameOverride, else nameOverride, else vgpud. Unlike most charts the
release's name is not part of it: the objects are the cluster's, one
vgpud a cluster, and the docs and runbooks name them. Not generated:
manifests/chart_test.go puts the calls where the manifests say vgpud.
*/}}
{{- define "vgpud.name" -}}
{{ .Values.nameOverride | default "vgpud" }}
{{- end -}}
{{- define "vgpud.fullname" -}}
{{ .Values.fullnameOverride | default .Values.nameOverride | default "vgpud" }}
{{- end -}}
