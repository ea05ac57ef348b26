//go:build bench

package bench

import (
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// sums reads Prometheus text from r and sums metric's samples by key of
// their labels ("" sums them all). It reports whether metric was there.
func sums(r io.Reader, metric string, key func(labels map[string]string) string) (map[string]float64, bool, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, false, fmt.Errorf("parse metrics: %w", err)
	}
	f, ok := families[metric]
	if !ok {
		return nil, false, nil
	}
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		k := ""
		if key != nil {
			k = key(labels)
		}
		out[k] += value(m)
	}
	return out, true, nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}

// leaderSums is sums over the leader's /metrics.
func leaderSums(metric string, key func(labels map[string]string) string) (map[string]float64, bool, error) {
	resp, err := http.Get("http://127.0.0.1:9090/metrics")
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	return sums(resp.Body, metric, key)
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
