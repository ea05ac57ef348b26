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

// vgpudObjectName finds a name the manifests give an object in a string
// the chart rendered: one that fullnameOverride should have renamed. A
// path under /etc (the container's) and longer names are not one.
var vgpudObjectName = regexp.MustCompile(`(^|[^-._/A-Za-z0-9]|[^c]/)vgpud(-(` + strings.Join(append(slices.Clone(objectSuffixes), "metrics", "namespace-labels"), "|") + `))?(['")\s.,;:]|$)`)

// What keeps the name vgpud under any override: the container (kubectl's
// default), its binary, the NRI plugin, a PrometheusRule group and the
// policies' match conditions.
var keepsVgpud = regexp.MustCompile(`(\.containers\[\d+\]\.name|\.command\[0\]|kubectl\.kubernetes\.io/default-container|\.matchConditions\[\d+\]\.name|\.groups\[\d+\]\.name)$`)

func TestChartNamesEveryObjectByTheOverrides(t *testing.T) {
	const ns, name, full = "gpu-share", "gshare", "gpushare"
	// The profile too: its default is vgpud-scheduler, a name the chart
	// keeps unless told.
	got := helmTemplate(t, ns, "nameOverride="+name, "fullnameOverride="+full, "schedulerName=gshare-sched",
		"monitoring.serviceMonitor=true", "monitoring.prometheusRule=true")
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
			if strings.Contains(path, "audience") || strings.Contains(s, "audience vgpud-metrics") {
				return
			}
			for _, line := range strings.Split(s, "\n") {
				// A pod's required-plugins names the NRI plugin vgpud.
				line = strings.NewReplacer(`["vgpud"]`, "", `\\["vgpud"`, "", `"vgpud" first, as ["vgpud", ...]`, "").Replace(line)
				if m := vgpudObjectName.FindString(line); m != "" && !proseVgpud(line, m) {
					t.Errorf("%s still names vgpud's object %q: %.200s", path, strings.TrimSpace(m), strings.TrimSpace(line))
				}
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
		"https://gpushare.gpu-share.svc:8443", "system:serviceaccount:gpu-share:gpushare'", "system:serviceaccount:gpu-share:gpushare-scheduler'",
		"system:serviceaccount:gpu-share:gpushare-namespace-labels'", "--label=app.kubernetes.io/name=gshare",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("with fullnameOverride, the chart lacks %s", want)
		}
	}
	for key, o := range got {
		for _, ref := range references(o) {
			if !has(ref[0], ref[1]) && !strings.HasPrefix(ref[1], "system:") && ref[1] != "extension-apiserver-authentication-reader" {
				t.Errorf("%s refers to %s/%s, which the chart does not make", key, ref[0], ref[1])
			}
		}
	}
	// nameOverride alone names the objects too.
	if _, ok := helmTemplate(t, ns, "nameOverride="+name)["DaemonSet/"+name]; !ok {
		t.Errorf("nameOverride=%s alone: no DaemonSet/%s", name, name)
	}
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
	if spec, ok := o["spec"].(map[string]any); ok {
		if p, ok := spec["paramRef"].(map[string]any); ok {
			// The param's kind is the policy's paramKind; a name is
			// either the Lease or the ConfigMap.
			refs = append(refs, [2]string{"Lease|ConfigMap", p["name"].(string)})
		}
	}
	for i, r := range refs {
		if r[0] == "Lease|ConfigMap" {
			refs[i][0] = "Lease"
			if !strings.HasSuffix(r[1], "-leader") {
				refs[i][0] = "ConfigMap"
			}
		}
	}
	return refs
}

// proseVgpud tells the product named in a sentence ("vgpud's hook", "a
// vgpud replica") from an object's name.
func proseVgpud(line, m string) bool {
	return strings.HasSuffix(strings.TrimRight(m, "'\")\t .,;:"), "vgpud") && !strings.Contains(line, "name: vgpud") &&
		!strings.Contains(line, ":vgpud'") && !strings.Contains(line, "== 'vgpud'") && !strings.Contains(line, "//vgpud.")
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
