package manifests

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// The chart's names: every object the manifests name "vgpud" or
// "vgpud-<suffix>" is named by the chart's vgpud.fullname (fullnameOverride,
// else nameOverride, else vgpud) and labelled app.kubernetes.io/name by
// vgpud.name (nameOverride, else vgpud). What is not an object's name
// keeps "vgpud": the container, the binary, the NRI plugin
// (required-plugins' ["vgpud"]), paths in the container, the metrics
// token's audience and the vgpud.io/ keys.

const (
	chartName     = `{{ include "vgpud.name" . }}`
	chartFullname = `{{ include "vgpud.fullname" . }}`
)

// objectSuffixes are what follows "vgpud-" in the names of the objects
// the manifests make or refer to (vgpud-metrics is also the token's
// audience, so the monitoring file's Service is renamed by its own edit).
var objectSuffixes = []string{
	"scheduler-authentication-reader", "scheduler-volume", "scheduler-lease", "scheduler",
	"keep-configmap-params", "keep-lease-params", "lease-takeover", "leader", "lease",
	"runtime-hook-optional", "runtime-hook-required", "hook-required", "gpu-pods",
	"annotations", "gpu-cordoner", "gpu-cordon", "gpu-agents-admin", "gpu-agents", "hami-records", "scheduled-only",
	"own-writes", "slice-env", "node-setup", "node-revert", "tls",
	"auth-delegator", "metrics-reader", "viewer", "resource-slices", "claims-admin-access",
	// After every gpu-* and mig-*: the alternation takes the first that
	// matches.
	"gpu", "mig",
}

var objectName = regexp.MustCompile(`vgpud-(` + strings.Join(objectSuffixes, "|") + `)\b`)

// nameEdits are the edits of a bare "vgpud" that names an object, and of
// the app.kubernetes.io/name labels, each found exactly as often as n
// says, by its old text (the scheduler's label before vgpud's, which it
// starts with).
func nameEdits(n map[string]int) []edit {
	all := []edit{
		{"app.kubernetes.io/name: vgpud-scheduler", "app.kubernetes.io/name: " + chartName + "-scheduler", 0},
		{"app.kubernetes.io/name=vgpud-scheduler", "app.kubernetes.io/name=" + chartName + "-scheduler", 0},
		{"orValue('') == 'vgpud-scheduler'", "orValue('') == '" + chartName + "-scheduler'", 0},
		{"app.kubernetes.io/name: vgpud", "app.kubernetes.io/name: " + chartName, 0},
		{"app.kubernetes.io/name=vgpud", "app.kubernetes.io/name=" + chartName, 0},
		{"serviceAccountName: vgpud\n", "serviceAccountName: " + chartFullname + "\n", 0},
	}
	for i := range all {
		all[i].n = n[all[i].old]
	}
	return all
}

// renameObjects applies edits (counted in the whole text), then names
// every "vgpud-<suffix>" outside the template's actions (the chart's own
// logic, such as its defaults, says vgpud-scheduler on purpose) by the
// chart's fullname, expecting n of them. Paths under /etc and names with
// more before them (for-vgpud-to-place) are not objects.
func renameObjects(t *testing.T, file, tmpl string, edits []edit, n int) string {
	t.Helper()
	for _, e := range edits {
		if c := strings.Count(tmpl, e.old); c != e.n {
			t.Fatalf("%s has %q %d times, the chart's name edit expects %d: update its nameEdits", file, e.old, c, e.n)
		}
		tmpl = strings.ReplaceAll(tmpl, e.old, e.new)
	}
	var out strings.Builder
	found := 0
	for rest := tmpl; rest != ""; {
		text, action := rest, ""
		if i := strings.Index(rest, "{{"); i >= 0 {
			j := strings.Index(rest[i:], "}}")
			if j < 0 {
				t.Fatalf("%s: an action opened at %d is not closed", file, i)
			}
			text, action, rest = rest[:i], rest[i:i+j+2], rest[i+j+2:]
		} else {
			rest = ""
		}
		last := 0
		for _, m := range objectName.FindAllStringIndex(text, -1) {
			before := text[:m[0]]
			if strings.HasSuffix(before, "/etc/") || (before != "" && strings.ContainsAny(before[len(before)-1:], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")) {
				continue
			}
			out.WriteString(text[last:m[0]])
			out.WriteString(chartFullname)
			last = m[0] + len("vgpud")
			found++
		}
		out.WriteString(text[last:])
		out.WriteString(action)
	}
	if found != n {
		t.Fatalf("%s names objects vgpud-<suffix> %d times outside actions, the chart's renaming expects %d: update renameObjects' count", file, found, n)
	}
	return out.String()
}

// installNames are vgpud.yaml's bare object names: metadata, roleRef,
// subject, paramRef and Service references (name: vgpud, never "- name:",
// a container's or a match condition's), RBAC's resourceNames, the
// ServiceAccount in usernames, the webhook configuration a policy keeps,
// the ConfigMap volume and the Service's DNS name.
func installNames() []edit {
	return append(nameEdits(map[string]int{
		"app.kubernetes.io/name: vgpud-scheduler": 3, "app.kubernetes.io/name=vgpud-scheduler": 2, "orValue('') == 'vgpud-scheduler'": 1,
		"app.kubernetes.io/name: vgpud": 12, "app.kubernetes.io/name=vgpud": 1, "serviceAccountName: vgpud\n": 1,
	}),
		edit{"resourceNames: [\"vgpud\"]", "resourceNames: [\"" + chartFullname + "\"]", 1},
		edit{"{{ .Release.Namespace }}:vgpud'", "{{ .Release.Namespace }}:" + chartFullname + "'", 4},
		edit{"{{ .Release.Namespace }}:vgpud)", "{{ .Release.Namespace }}:" + chartFullname + ")", 1},
		edit{"object.metadata.name == 'vgpud'", "object.metadata.name == '" + chartFullname + "'", 1},
		edit{"configMap: {name: vgpud}", "configMap: {name: " + chartFullname + "}", 1},
		edit{"https://vgpud.{{ .Release.Namespace }}.svc", "https://" + chartFullname + ".{{ .Release.Namespace }}.svc", 1},
	)
}

var bareName = regexp.MustCompile(`(?m)^( *)name: vgpud$`)

// renameBare names each metadata, roleRef, subject, paramRef and service
// reference "name: vgpud" by the chart's fullname, expecting n.
func renameBare(t *testing.T, file, tmpl string, n int) string {
	t.Helper()
	if c := len(bareName.FindAllStringIndex(tmpl, -1)); c != n {
		t.Fatalf("%s has \"name: vgpud\" %d times, the chart's renaming expects %d: update its count", file, c, n)
	}
	return bareName.ReplaceAllString(tmpl, "${1}name: "+chartFullname)
}

// chartNames gives a generated template the chart's names.
func chartNames(t *testing.T, file, tmpl string) string {
	t.Helper()
	switch file {
	case "vgpud.yaml":
		tmpl = renameObjects(t, file, tmpl, installNames(), 155)
		return renameBare(t, file, tmpl, 20)
	case "node-revert.yaml":
		tmpl = renameObjects(t, file, tmpl, nameEdits(map[string]int{"app.kubernetes.io/name: vgpud": 5, "serviceAccountName: vgpud\n": 2}), 4)
		return renameBare(t, file, tmpl, 0)
	case "monitoring/":
		tmpl = renameObjects(t, file, tmpl, append(nameEdits(map[string]int{"app.kubernetes.io/name: vgpud": 5}), edit{"  name: vgpud-metrics\n", "  name: " + chartFullname + "-metrics\n", 1}), 4)
		return renameBare(t, file, tmpl, 2)
	}
	panic(fmt.Sprintf("chartNames: no names for %s", file))
}
