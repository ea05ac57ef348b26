//go:build bench

package bench

import (
	"fmt"
	"net/http"
	"testing"

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
