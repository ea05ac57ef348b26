//go:build bench

package bench

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/vgpud/vgpud/scripts/harness"
)

// leaderSums is harness.MetricSums over the leader's /metrics.
func leaderSums(metric string, key func(labels map[string]string) string) (map[string]float64, bool, error) {
	resp, err := http.Get("http://127.0.0.1:9090/metrics")
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	return harness.MetricSums(resp.Body, metric, key)
}

// leaderMetric reads one metric from the leader's /metrics, its samples
// summed.
func leaderMetric(name string) (float64, error) {
	s, ok, err := leaderSums(name, nil)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("no %s in the leader's metrics yet", name)
	}
	return s[""], nil
}

// leaderRequests reads the leader's vgpud_api_requests_total, summed by
// "verb resource".
func leaderRequests() (map[string]float64, error) {
	s, _, err := leaderSums("vgpud_api_requests_total", func(l map[string]string) string { return l["verb"] + " " + l["resource"] })
	return s, err
}

// podReads reads the leader's vgpud_extender_pod_reads_total by "from".
func podReads(t *testing.T) map[string]float64 {
	s, _, err := leaderSums("vgpud_extender_pod_reads_total", func(l map[string]string) string { return l["from"] })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// leaderGC is the leader's bytes allocated since it started and its
// completed collections (go_gc_duration_seconds' count): read around a
// round, what each scheduled pod costs the collector.
func leaderGC() (alloc, cycles float64, err error) {
	resp, err := http.Get("http://127.0.0.1:9090/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("parse the leader's metrics: %w", err)
	}
	a, g := families["go_memstats_alloc_bytes_total"], families["go_gc_duration_seconds"]
	if a == nil || g == nil || len(a.GetMetric()) == 0 || len(g.GetMetric()) == 0 {
		return 0, 0, fmt.Errorf("no go_memstats_alloc_bytes_total or go_gc_duration_seconds in the leader's metrics")
	}
	return a.GetMetric()[0].GetCounter().GetValue(), float64(g.GetMetric()[0].GetSummary().GetSampleCount()), nil
}
