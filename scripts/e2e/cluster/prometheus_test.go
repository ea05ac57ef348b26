//go:build e2e

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

const (
	monitoringNS = "e2e-monitoring"
	promListen   = "127.0.0.1:19090"
)

// monitoring runs Debian's Prometheus against the cluster with
// manifests/monitoring: its scrape job (every replica, with a token for
// audience vgpud-metrics), its alert rules (promtool's unit tests first),
// and every query of its dashboard, each of which must return data. Then
// the two alerts that matter most fire when their condition is caused: a
// GPU marked unhealthy through the mock (an XID), and a node role stopped.
func monitoring(t *testing.T, e env, nodes []string) {
	if len(nodes) < 2 {
		t.Skipf("needs a node besides the leader's; the cluster has %d", len(nodes))
	}
	ctx := context.Background()
	dir := filepath.Join(e.scripts, "..", "manifests", "monitoring")
	if out, err := exec.Command("promtool", "test", "rules", filepath.Join(dir, "alerts_test.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Log("promtool test rules alerts_test.yaml: SUCCESS")

	prom := e.startPrometheus(t, dir)
	harness.Eventually(t, 90*time.Second, "Prometheus scrapes every vgpud replica", func() error {
		res, err := prom.query(`up{job="vgpud"} == 1`)
		if err != nil {
			return err
		}
		if len(res) != len(nodes) {
			return fmt.Errorf("%d of %d replicas up", len(res), len(nodes))
		}
		return nil
	})

	// Something for every panel to show: GPU pods in a namespace with a
	// quota, and one that fits nowhere (the filter's refusals).
	e.namespace(t, monitoringNS, nil)
	if _, err := e.kube.CoreV1().ResourceQuotas(monitoringNS).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			"requests.nvidia.com/gpumem": resource.MustParse("20000"), "requests.nvidia.com/gpucores": resource.MustParse("200")}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range 3 {
		p := gpuPod(fmt.Sprintf("watched-%d", i), map[string]string{"nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "20"}, nil)
		if _, err := e.kube.CoreV1().Pods(monitoringNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
	}
	huge := gpuPod("too-big", map[string]string{"nvidia.com/gpumem": "100", "nvidia.com/gpu": "9"}, nil)
	if _, err := e.kube.CoreV1().Pods(monitoringNS).Create(ctx, huge, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, monitoringNS, names, 60*time.Second)
	// The containers' panels: watched-0 uses part of its slice, and a
	// host process memory on the same GPU.
	watched, err := e.kube.CoreV1().Pods(monitoringNS).Get(ctx, names[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := protocol.DecodeAssignment(watched.Annotations[wellknown.AnnotationAssignment])
	if err != nil {
		t.Fatal(err)
	}
	replica, err := e.vgpudPod(watched.Spec.NodeName)
	if err != nil {
		t.Fatal(err)
	}
	// The mock forgets a process once its PID has ended.
	host := startHostProcess(t)
	gpu := a.Containers[0].GPUs[0].UUID
	e.declareProcess(t, replica, gpu, e.containerPID(t, monitoringNS, names[0]), 500, 10)
	e.declareProcess(t, replica, gpu, host, 200, 5)

	// Every query of every panel returns data ($__rate_interval as 1m).
	raw, err := os.ReadFile(filepath.Join(dir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Name, Type, Definition, AllValue string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	// The node and namespace variables offer values (label_values is
	// Grafana's; the query behind it is a count by the label), and every
	// panel is queried as a user who chose "All" sees it.
	all := []string{"$__rate_interval", "1m"}
	labelValues := regexp.MustCompile(`^label_values\((\w+), (\w+)\)$`)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Fatalf("variable %s: %q is not label_values(metric, label)", v.Name, v.Definition)
		}
		var res []promSample
		if err := harness.Poll(60*time.Second, func() error {
			var err error
			if res, err = prom.query(fmt.Sprintf("count by (%s) (%s)", m[2], m[1])); err == nil && len(res) == 0 {
				err = errors.New("no values")
			}
			return err
		}); err != nil {
			t.Errorf("variable %s (%s): %v", v.Name, v.Definition, err)
		}
		t.Logf("variable %s offers %d values", v.Name, len(res))
		all = append(all, "$"+v.Name, v.AllValue)
	}
	asAll := strings.NewReplacer(all...)
	queries, panels := 0, 0
	for _, p := range dash.Panels {
		if len(p.Targets) > 0 {
			panels++
		}
		for _, target := range p.Targets {
			expr := asAll.Replace(target.Expr)
			queries++
			var res []promSample
			err := harness.Poll(60*time.Second, func() error {
				var err error
				if res, err = prom.query(expr); err != nil {
					return err
				}
				// NaN is what a quantile of no observations gives: not data.
				for _, r := range res {
					if v, ok := r.Value[1].(string); ok && v != "NaN" {
						return nil
					}
				}
				return fmt.Errorf("no data: %v", res)
			})
			if err != nil {
				t.Errorf("panel %q: %s: %v", p.Title, expr, err)
				continue
			}
			t.Logf("panel %q: %d series, e.g. %s", p.Title, len(res), res[0])
		}
	}
	t.Logf("%d panels, %d queries, every one answered with a number", panels, queries)

	// The two alerts that matter most, caused on a node that does not
	// lead: an XID on its GPU 0, then its node role stopped (its label
	// removed, as an operator drains vgpud from a node).
	leader, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	off := nodes[0]
	if off == leader.Spec.NodeName {
		off = nodes[1]
	}
	vp, err := e.vgpudPod(off)
	if err != nil {
		t.Fatal(err)
	}
	gpu0 := e.inspect(t, off).GPUs[0].UUID
	if out, err := e.kubectl("-n", system, "exec", vp.Name, "--", "vgpud", "inspect", "--inject-xid=0:79"); err != nil {
		t.Fatalf("inject XID 79: %v %s", err, out)
	}
	start := time.Now()
	prom.firing(t, "VgpudGPUUnhealthy", map[string]string{"node": off, "uuid": gpu0})
	t.Logf("XID 79 on %s GPU 0 -> VgpudGPUUnhealthy firing in %v", off, time.Since(start).Round(time.Millisecond))

	putBack := e.takeGPULabel(t, off)
	start = time.Now()
	prom.firing(t, "VgpudNodeRoleNotServing", map[string]string{"node": off})
	t.Logf("%s's vgpud stopped -> VgpudNodeRoleNotServing firing in %v", off, time.Since(start).Round(time.Millisecond))

	// Back as found: a fresh vgpud pod (fresh mock GPUs) serving there.
	putBack()
	harness.Eventually(t, 120*time.Second, off+" served again with healthy GPUs", func() error {
		if err := e.servedAgain(off, vp); err != nil {
			return err
		}
		return prom.notFiring("VgpudGPUUnhealthy", "VgpudNodeRoleNotServing")
	})
}

// prometheus is a running Prometheus and its query API.
type prometheus struct{ base string }

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}

func (s promSample) String() string { return fmt.Sprintf("%v = %v", s.Metric, s.Value[1]) }

// startPrometheus runs Prometheus with the monitoring directory's scrape
// job and its rules, whose `for` is cut to 4 s so that the alerts
// caused here fire within the test; the rules as shipped are what
// promtool tested.
func (e env) startPrometheus(t *testing.T, dir string) prometheus {
	t.Helper()
	work := t.TempDir()
	token, err := e.scraperToken()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "token"), []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "scrape.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	job := cfg["scrape_configs"].([]any)[0].(map[string]any)
	job["authorization"] = map[string]any{"credentials_file": filepath.Join(work, "token")}
	// Debian builds Prometheus without Kubernetes discovery: Prometheus's
	// own discovery code runs the job's kubernetes_sd_configs from
	// outside the cluster (scripts/promcheck, its one change the
	// kubeconfig) and hands what it finds, meta labels and all, to this
	// Prometheus through a file, for the job's own relabelling.
	if _, ok := job["kubernetes_sd_configs"]; !ok {
		t.Fatal("scrape.yaml's job has no kubernetes_sd_configs")
	}
	delete(job, "kubernetes_sd_configs")
	targets := filepath.Join(work, "targets.json")
	e.discover(t, filepath.Join(dir, "scrape.yaml"), targets)
	job["file_sd_configs"] = []any{map[string]any{"files": []string{targets}, "refresh_interval": "2s"}}
	job["scrape_interval"] = "2s"
	cfg["global"] = map[string]any{"scrape_interval": "2s", "evaluation_interval": "2s"}
	rules, err := os.ReadFile(filepath.Join(dir, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rules = regexp.MustCompile(`(?m)^(\s+for:) \S+$`).ReplaceAll(rules, []byte("$1 4s"))
	if err := os.WriteFile(filepath.Join(work, "alerts.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg["rule_files"] = []string{filepath.Join(work, "alerts.yaml")}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "prometheus.yml"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	harness.Spawn(t, "prometheus", "prometheus", "--config.file="+filepath.Join(work, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(work, "data"),
		"--web.listen-address="+promListen, "--log.level=warn")
	p := prometheus{base: "http://" + promListen}
	harness.Eventually(t, 30*time.Second, "Prometheus ready", func() error {
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	})
	return p
}

// discover runs Prometheus's Kubernetes discovery with scrape's job
// (scripts/promcheck, built on first use) until the test ends, writing
// what it finds to targets as file_sd JSON.
func (e env) discover(t *testing.T, scrape, targets string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "promcheck")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(e.scripts, "promcheck")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build scripts/promcheck: %v\n%s", err, out)
	}
	harness.Spawn(t, "promcheck", bin, "-scrape", scrape, "-job", "vgpud", "-kubeconfig", e.kubeconfig, "-out", targets)
	harness.Eventually(t, 60*time.Second, "Kubernetes discovery finds vgpud's pods", func() error {
		raw, err := os.ReadFile(targets)
		if err != nil {
			return err
		}
		var groups []struct{ Targets []string }
		if err := json.Unmarshal(raw, &groups); err != nil {
			return err
		}
		if len(groups) == 0 {
			return errors.New("no targets yet")
		}
		t.Logf("Kubernetes discovery: %d targets in vgpud-system", len(groups))
		return nil
	})
}

// query evaluates an instant PromQL query.
func (p prometheus) query(expr string) ([]promSample, error) {
	resp, err := http.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status, Error string
		Data          struct{ Result []promSample }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, body.Error)
	}
	return body.Data.Result, nil
}

// firing waits for alert to fire with labels.
func (p prometheus) firing(t *testing.T, alert string, labels map[string]string) {
	t.Helper()
	sel := []string{fmt.Sprintf("alertname=%q", alert), `alertstate="firing"`}
	for k, v := range labels {
		sel = append(sel, fmt.Sprintf("%s=%q", k, v))
	}
	harness.Eventually(t, 90*time.Second, alert+" firing", func() error {
		res, err := p.query("ALERTS{" + strings.Join(sel, ",") + "}")
		if err != nil {
			return err
		}
		if len(res) == 0 {
			pending, _ := p.query(fmt.Sprintf("ALERTS{alertname=%q}", alert))
			return fmt.Errorf("not firing (ALERTS: %v)", pending)
		}
		return nil
	})
}

// notFiring says which of alerts still fire.
func (p prometheus) notFiring(alerts ...string) error {
	for _, a := range alerts {
		res, err := p.query(fmt.Sprintf("ALERTS{alertname=%q,alertstate=\"firing\"}", a))
		if err != nil {
			return err
		}
		if len(res) > 0 {
			return fmt.Errorf("%s still firing: %v", a, res)
		}
	}
	return nil
}
