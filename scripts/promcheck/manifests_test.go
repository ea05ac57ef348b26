package main

import (
	"log/slog"
	"os"
	"strings"
	"testing"

	monv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/discovery/kubernetes"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const monitoring = "../../manifests/monitoring/"

// The files for the Prometheus Operator decode as its own types, with no
// field those types do not know: the Operator would drop or refuse it.
func TestOperatorFilesAreTheOperatorsTypes(t *testing.T) {
	raw, err := os.ReadFile(monitoring + "servicemonitor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(raw), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("servicemonitor.yaml: %d documents, want a Service and a ServiceMonitor", len(docs))
	}
	var svc corev1.Service
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &svc); err != nil || svc.Kind != "Service" {
		t.Fatalf("servicemonitor.yaml's Service (%s): %v", svc.Kind, err)
	}
	var sm monv1.ServiceMonitor
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &sm); err != nil || sm.Kind != monv1.ServiceMonitorsKind {
		t.Fatalf("servicemonitor.yaml's ServiceMonitor (%s): %v", sm.Kind, err)
	}
	for _, ep := range sm.Spec.Endpoints {
		if ep.BearerTokenFile == "" {
			t.Errorf("endpoint %s sends no token: vgpud answers none without one", ep.Port)
		}
	}

	raw, err = os.ReadFile(monitoring + "prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pr monv1.PrometheusRule
	if err := yaml.UnmarshalStrict(raw, &pr); err != nil || pr.Kind != monv1.PrometheusRuleKind {
		t.Fatalf("prometheusrule.yaml (%s): %v", pr.Kind, err)
	}
	// The groups as Prometheus itself parses rule files.
	groups, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := rulefmt.Parse(groups, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler)); len(errs) > 0 {
		t.Fatalf("prometheusrule.yaml's groups: %v", errs)
	}
	n := 0
	for _, g := range pr.Spec.Groups {
		n += len(g.Rules)
	}
	t.Logf("ServiceMonitor %s, PrometheusRule %s with %d rules", sm.Name, pr.Name, n)
}

// scrape.yaml loads as Prometheus loads it, and its job discovers pods
// in vgpud's namespace.
func TestScrapeJobLoads(t *testing.T) {
	sds, err := discoveryOf(monitoring+"scrape.yaml", "vgpud", "/nonexistent/kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	k := sds[0].(*kubernetes.SDConfig)
	if k.Role != kubernetes.RolePod || len(k.NamespaceDiscovery.Names) != 1 || k.NamespaceDiscovery.Names[0] != "vgpud-system" {
		t.Fatalf("discovery %+v: want pods in vgpud-system", k)
	}
}
