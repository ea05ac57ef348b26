package manifests

import (
	"bytes"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// alertRules is what the tests read of a rule group file.
type alertRules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func readYAML(t *testing.T, path string, into any) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return raw
}

const runbooks = "https://github.com/vgpud/vgpud/blob/main/docs/runbooks.md#"

// Every alert names its runbook, a section of docs/runbooks.md, and every
// section there is an alert's.
func TestEveryAlertHasARunbook(t *testing.T) {
	var rules alertRules
	readYAML(t, "monitoring/alerts.yaml", &rules)
	doc, err := os.ReadFile("../docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	var sections []string
	for _, m := range regexp.MustCompile(`(?m)^## (\w+)$`).FindAllStringSubmatch(string(doc), -1) {
		sections = append(sections, strings.ToLower(m[1]))
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, strings.ToLower(r.Alert))
			if got, want := r.Annotations["runbook_url"], runbooks+strings.ToLower(r.Alert); got != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
			}
		}
	}
	slices.Sort(alerts)
	slices.Sort(sections)
	if !slices.Equal(alerts, sections) {
		t.Errorf("alerts %v, runbook sections %v: want one section per alert", alerts, sections)
	}
}

// docs/monitoring.md's table of alerts has a row for each alert, and
// none for an alert that is not there.
func TestEveryAlertIsInTheMonitoringDoc(t *testing.T) {
	var rules alertRules
	readYAML(t, "monitoring/alerts.yaml", &rules)
	doc, err := os.ReadFile("../docs/monitoring.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows, alerts []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(Vgpud\\w+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		rows = append(rows, m[1])
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
		}
	}
	slices.Sort(alerts)
	slices.Sort(rows)
	if !slices.Equal(alerts, rows) {
		t.Errorf("alerts %v, docs/monitoring.md's rows %v: want one row per alert", alerts, rows)
	}
}

// Every VGPUD_ variable the chart's values name is a flag's, as
// docs/settings.md lists them, or a variable docs/settings-runtime.md
// lists as environment only.
func TestChartValuesNameRealSettings(t *testing.T) {
	values, err := os.ReadFile("../charts/vgpud/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	settings, err := os.ReadFile("../docs/settings.md")
	if err != nil {
		t.Fatal(err)
	}
	runtimeVars, err := os.ReadFile("../docs/settings-runtime.md")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`VGPUD_[A-Z0-9_]+`).FindAllString(string(values), -1)
	if len(names) == 0 {
		t.Fatal("the values name no VGPUD_ variable; the test reads nothing")
	}
	for _, name := range names {
		flag := "`--" + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, "VGPUD_")), "_", "-") + "`"
		if !bytes.Contains(settings, []byte("| "+flag+" |")) && !bytes.Contains(runtimeVars, []byte("| `"+name+"` |")) {
			t.Errorf("charts/vgpud/values.yaml names %s, but docs/settings.md lists no flag %s and docs/settings-runtime.md no such variable", name, flag)
		}
	}
}

// prometheusRuleHeader opens the generated PrometheusRule.
const prometheusRuleHeader = `# vgpud's alerts for the Prometheus Operator: the groups of alerts.yaml,
# which is the one source (generated: VGPUD_UPDATE_DOCS=1 go test
# ./manifests/). Each alert's runbook is its section of docs/runbooks.md.
# Your Prometheus resource's ruleSelector must match its labels.
`

// monitoring/prometheusrule.yaml carries alerts.yaml's groups unchanged.
func TestPrometheusRuleIsTheAlerts(t *testing.T) {
	var alerts map[string]any
	readYAML(t, "monitoring/alerts.yaml", &alerts)
	rule := map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata": map[string]any{
			"name": "vgpud", "namespace": "vgpud-system",
			"labels": map[string]any{"app.kubernetes.io/name": "vgpud"},
		},
		"spec": map[string]any{"groups": alerts["groups"]},
	}
	body, err := yaml.Marshal(rule)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte(prometheusRuleHeader), body...)
	const path = "monitoring/prometheusrule.yaml"
	if os.Getenv("VGPUD_UPDATE_DOCS") != "" {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not alerts.yaml's groups: run VGPUD_UPDATE_DOCS=1 go test ./manifests/", path)
	}
}

// The ServiceMonitor scrapes as scrape.yaml's job does: HTTPS, the same
// token file, the pod's node as host, the vgpud pods' metrics port.
func TestServiceMonitorIsTheScrapeJob(t *testing.T) {
	var job struct {
		ScrapeConfigs []struct {
			Scheme        string `json:"scheme"`
			TLSConfig     map[string]any
			Authorization struct {
				CredentialsFile string `json:"credentials_file"`
			} `json:"authorization"`
			RelabelConfigs []struct {
				SourceLabels []string `json:"source_labels"`
				Regex        string   `json:"regex"`
				TargetLabel  string   `json:"target_label"`
			} `json:"relabel_configs"`
		} `json:"scrape_configs"`
	}
	readYAML(t, "monitoring/scrape.yaml", &job)
	raw, err := os.ReadFile("monitoring/servicemonitor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(raw), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("servicemonitor.yaml: %d documents, want the Service and the ServiceMonitor", len(docs))
	}
	var svc struct {
		Metadata struct{ Labels map[string]string }
		Spec     struct {
			Selector map[string]string
			Ports    []struct{ Name, TargetPort string }
		}
	}
	var sm struct {
		Spec struct {
			Selector  struct{ MatchLabels map[string]string }
			Endpoints []struct {
				Port, Scheme, BearerTokenFile string
				TLSConfig                     struct{ InsecureSkipVerify bool }
				HonorLabels                   bool
				Relabelings                   []struct {
					SourceLabels []string
					TargetLabel  string
				}
			}
		}
	}
	if err := yaml.Unmarshal([]byte(docs[0]), &svc); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(docs[1]), &sm); err != nil {
		t.Fatal(err)
	}
	ds, err := Document("DaemonSet")
	if err != nil {
		t.Fatal(err)
	}
	var daemonSet struct {
		Spec struct {
			Template struct {
				Metadata struct{ Labels map[string]string }
			}
		}
	}
	if err := yaml.Unmarshal([]byte(ds), &daemonSet); err != nil {
		t.Fatal(err)
	}
	podLabels := daemonSet.Spec.Template.Metadata.Labels
	for k, v := range svc.Spec.Selector {
		if podLabels[k] != v {
			t.Errorf("the Service selects %s=%s; vgpud's pods carry %v", k, v, podLabels)
		}
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Metadata.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s; the Service carries %v", k, v, svc.Metadata.Labels)
		}
	}
	if len(sm.Spec.Endpoints) != 1 || len(job.ScrapeConfigs) != 1 {
		t.Fatalf("%d endpoints, %d scrape jobs; want one each", len(sm.Spec.Endpoints), len(job.ScrapeConfigs))
	}
	ep, j := sm.Spec.Endpoints[0], job.ScrapeConfigs[0]
	if len(svc.Spec.Ports) != 1 || ep.Port != svc.Spec.Ports[0].Name || svc.Spec.Ports[0].TargetPort != "metrics" {
		t.Errorf("endpoint port %q, Service ports %+v: want the pods' metrics port", ep.Port, svc.Spec.Ports)
	}
	if ep.Scheme != j.Scheme || ep.BearerTokenFile != j.Authorization.CredentialsFile || !ep.TLSConfig.InsecureSkipVerify || !ep.HonorLabels {
		t.Errorf("endpoint %+v does not scrape as the job does (%s, token %s, insecure_skip_verify) with the metrics' own labels winning", ep, j.Scheme, j.Authorization.CredentialsFile)
	}
	var host []string
	for _, r := range j.RelabelConfigs {
		if r.TargetLabel == "host" {
			host = r.SourceLabels
		}
	}
	if len(ep.Relabelings) != 1 || ep.Relabelings[0].TargetLabel != "host" || !reflect.DeepEqual(ep.Relabelings[0].SourceLabels, host) {
		t.Errorf("endpoint relabelings %+v; want the job's host from %v", ep.Relabelings, host)
	}
}
