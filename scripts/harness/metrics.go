package harness

import (
	"fmt"
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MetricSums reads Prometheus text from r and sums metric's samples by
// key of their labels (nil: "" sums them all). It reports whether metric
// was there.
func MetricSums(r io.Reader, metric string, key func(labels map[string]string) string) (map[string]float64, bool, error) {
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
