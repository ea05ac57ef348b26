package manifests

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// walkStrings calls f with every string in v and where it is, as
// kind/name.path.to[i].it.
func walkStrings(path string, v any, f func(path, s string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			walkStrings(path+"."+k, x, f)
		}
	case []any:
		for i, x := range v {
			walkStrings(fmt.Sprintf("%s[%d]", path, i), x, f)
		}
	case string:
		f(path, v)
	}
}

// leftoverName finds what may name an object of vgpud's in a string the
// chart rendered under fullnameOverride: any vgpud-<name>, and vgpud
// quoted (a CEL literal). keptVgpud are the strings that keep the name:
// the NRI plugin in required-plugins, paths in the containers, the
// metrics token's audience, a match condition's name.
var (
	leftoverName = regexp.MustCompile(`(^|[^-._/A-Za-z0-9])vgpud-[a-z0-9-]+|['"]vgpud['"]`)
	keptVgpud    = strings.NewReplacer(`'["vgpud"]'`, "", `\\["vgpud"(`, "", `"vgpud" first, as ["vgpud", ...]`, "",
		"/etc/vgpud-tls", "", "/etc/vgpud-scheduler", "", "/var/run/secrets/vgpud-metrics", "", "for-vgpud-to-place", "",
		// The label on the webhook's claim templates names the program.
		"app.kubernetes.io/managed-by'].orValue('') == 'vgpud'", "")
)

// What keeps the name vgpud under any override: the container (kubectl's
// default), its binary, the NRI plugin, a PrometheusRule group and the
// policies' match conditions.
var keepsVgpud = regexp.MustCompile(`(\.containers\[\d+\]\.name|\.command\[0\]|kubectl\.kubernetes\.io/default-container|\.matchConditions\[\d+\]\.name|\.groups\[\d+\]\.name)$`)

func TestChartNamesEveryObjectByTheOverrides(t *testing.T) {
	const ns, name, full = "gpu-share", "gshare", "gpushare"
	// The profile too: its default is vgpud-scheduler, a name the chart
	// keeps unless told.
	set := []string{"nameOverride=" + name, "fullnameOverride=" + full, "schedulerName=gshare-sched", "monitoring.serviceMonitor=true", "monitoring.prometheusRule=true"}
	// And for a 1.34 cluster (no MutatingAdmissionPolicy), with the
	// chart's own Namespace.
	for _, more := range [][]string{nil, {"--kube-version=1.34.4"}, {"namespace.create=true"}} {
		t.Run(strings.Join(append([]string{"as set"}, more...), " "), func(t *testing.T) {
			namedByOverrides(t, helmTemplate(t, ns, append(slices.Clone(set), more...)...), ns, name, full)
		})
	}
	// nameOverride alone names the objects too.
	if _, ok := helmTemplate(t, ns, "nameOverride="+name)["DaemonSet/"+name]; !ok {
		t.Errorf("nameOverride=%s alone: no DaemonSet/%s", name, name)
	}
}

func namedByOverrides(t *testing.T, got map[string]map[string]any, ns, name, full string) {
	for key, o := range got {
		kind, objName, _ := strings.Cut(key, "/")
		if kind != "Namespace" && !strings.HasPrefix(objName, full) {
			t.Errorf("%s: not named by fullnameOverride %s", key, full)
		}
		walkStrings(key, o, func(path, s string) {
			if strings.HasSuffix(path, "app.kubernetes.io/name") && s != name && s != name+"-scheduler" {
				t.Errorf("%s = %q; want nameOverride %s (or %s-scheduler)", path, s, name, name)
			}
			if s == "vgpud" {
				if !keepsVgpud.MatchString(path) {
					t.Errorf("%s is vgpud; want it named by fullnameOverride", path)
				}
				return
			}
			if m := leftoverName.FindString(keptVgpud.Replace(s)); m != "" {
				t.Errorf("%s still names vgpud's object %q: %.200s", path, strings.TrimSpace(m), s)
			}
		})
	}
	// Everything an object names by its name is there, under the new
	// names: what vgpud's binary, kube-scheduler and the policies find.
	has := func(kind, n string) bool { _, ok := got[kind+"/"+n]; return ok }
	for _, want := range [][2]string{
		{"Lease", full + "-leader"}, {"Lease", full + "-node-setup"}, {"Secret", full + "-tls"},
		{"MutatingWebhookConfiguration", full}, {"Service", full}, {"Deployment", full + "-scheduler"},
		{"ConfigMap", full}, {"ConfigMap", full + "-scheduler"}, {"DaemonSet", full}, {"ServiceAccount", full},
	} {
		if !has(want[0], want[1]) {
			t.Errorf("no %s/%s", want[0], want[1])
		}
	}
	text := jsonText(t, got)
	for _, want := range []string{
		`{"name":"VGPUD_LEASE_NAME","value":"gpushare-leader"}`, `{"name":"VGPUD_TLS_SECRET_NAME","value":"gpushare-tls"}`,
		`{"name":"VGPUD_WEBHOOK_CONFIG_NAME","value":"gpushare"}`, `{"name":"VGPUD_SERVICE_NAME","value":"gpushare"}`,
		`{"name":"VGPUD_SCHEDULER_DEPLOYMENT","value":"gpushare-scheduler"}`, `"--lease=gpushare-node-setup"`,
		"https://" + full + "." + ns + ".svc:8443", "system:serviceaccount:" + ns + ":" + full + "'", "system:serviceaccount:" + ns + ":" + full + "-scheduler'",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("with fullnameOverride, the chart lacks %s", want)
		}
	}
	if has("Job", full+"-namespace-labels") {
		for _, want := range []string{"system:serviceaccount:" + ns + ":" + full + "-namespace-labels'", "--label=app.kubernetes.io/name=" + name} {
			if !strings.Contains(text, want) {
				t.Errorf("with fullnameOverride, the namespace hook lacks %s", want)
			}
		}
	}
	for key, o := range got {
		for _, ref := range references(o) {
			if !has(ref[0], ref[1]) && !strings.HasPrefix(ref[1], "system:") && ref[1] != "extension-apiserver-authentication-reader" {
				t.Errorf("%s refers to %s/%s, which the chart does not make", key, ref[0], ref[1])
			}
		}
	}
	// Selectors select the pods the chart labels; the policy that lets
	// the leader delete kube-scheduler's pods knows their label; each
	// node-setup container holds the renamed Lease.
	sched := fmt.Sprint(dig(got["Deployment/"+full+"-scheduler"], "spec", "template", "metadata", "labels", "app.kubernetes.io/name"))
	if !strings.Contains(jsonText(t, got["ValidatingAdmissionPolicy/"+full+"-own-writes"]), "orValue('') == '"+sched+"'") {
		t.Errorf("%s-own-writes does not know kube-scheduler's pods by their label %q", full, sched)
	}
	for key, o := range got {
		kind, _, _ := strings.Cut(key, "/")
		if kind != "DaemonSet" && kind != "Deployment" {
			continue
		}
		labels, _ := dig(o, "spec", "template", "metadata", "labels").(map[string]any)
		sel, _ := dig(o, "spec", "selector", "matchLabels").(map[string]any)
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s selects %s=%v; its pods carry %v", key, k, v, labels[k])
			}
		}
		for _, list := range []string{"initContainers", "containers"} {
			cs, _ := dig(o, "spec", "template", "spec", list).([]any)
			for _, c := range cs {
				args := fmt.Sprint(dig(c.(map[string]any), "args"))
				if strings.Contains(args, "node-setup --node=") && !strings.Contains(args, "--lease="+full+"-node-setup") {
					t.Errorf("%s: node setup %s holds another Lease than %s-node-setup", key, args, full)
				}
			}
		}
	}
	for _, svc := range []string{"Service/" + full, "Service/" + full + "-metrics"} {
		sel, _ := dig(got[svc], "spec", "selector").(map[string]any)
		labels, _ := dig(got["DaemonSet/"+full], "spec", "template", "metadata", "labels").(map[string]any)
		if _, ok := got[svc]; ok && (len(sel) == 0 || sel["app.kubernetes.io/name"] != labels["app.kubernetes.io/name"]) {
			t.Errorf("%s selects %v; vgpud's pods carry %v", svc, sel, labels)
		}
	}
}

// dig is v's value at keys, nil where there is none.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// references are the kind/name pairs o refers to by name in the fields
// RBAC, policies, pods and webhooks use.
func references(o map[string]any) [][2]string {
	var refs [][2]string
	kind, _ := o["kind"].(string)
	if r, ok := o["roleRef"].(map[string]any); ok {
		refs = append(refs, [2]string{r["kind"].(string), r["name"].(string)})
	}
	if subs, ok := o["subjects"].([]any); ok {
		for _, s := range subs {
			s := s.(map[string]any)
			refs = append(refs, [2]string{s["kind"].(string), s["name"].(string)})
		}
	}
	walkStrings(kind, o, func(path, s string) {
		switch {
		case strings.HasSuffix(path, ".spec.policyName"):
			refs = append(refs, [2]string{strings.TrimSuffix(kind, "Binding"), s})
		case strings.HasSuffix(path, ".serviceAccountName"):
			refs = append(refs, [2]string{"ServiceAccount", s})
		case strings.HasSuffix(path, ".configMap.name"):
			refs = append(refs, [2]string{"ConfigMap", s})
		case strings.HasSuffix(path, ".secret.secretName"):
			refs = append(refs, [2]string{"Secret", s})
		case strings.HasSuffix(path, ".clientConfig.service.name"):
			refs = append(refs, [2]string{"Service", s})
		}
	})
	// A binding's param is of its policy's paramKind: vgpud's are the
	// leader Lease and its ConfigMap.
	if name, ok := dig(o, "spec", "paramRef", "name").(string); ok {
		kind := "ConfigMap"
		if strings.HasSuffix(name, "-leader") {
			kind = "Lease"
		}
		refs = append(refs, [2]string{kind, name})
	}
	return refs
}

func TestChartRefusesBadNameOverrides(t *testing.T) {
	for _, v := range []string{"fullnameOverride=Gpu", "nameOverride=gpu_share", "fullnameOverride=" + strings.Repeat("a", 41), "nameOverride=1gpu"} {
		for _, skip := range []string{"", "--skip-schema-validation"} {
			args := []string{v}
			if skip != "" {
				args = append(args, skip)
			}
			_, err := helmRender(t, "vgpud-system", args...)
			key, _, _ := strings.Cut(v, "=")
			if err == nil || !strings.Contains(err.Error(), key) {
				t.Errorf("%s %s: rendered, or refused without naming %s: %v", v, skip, key, err)
			}
		}
	}
}

func jsonText(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}
