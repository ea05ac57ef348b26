package harness

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"

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
		k := ""
		if key != nil {
			k = key(labelsOf(m))
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

// HistogramTotals reads Prometheus text from r and returns the sum and
// count of histogram metric's observations, over the series whose labels
// keep accepts (nil: every series).
func HistogramTotals(r io.Reader, metric string, keep func(labels map[string]string) bool) (sum float64, count uint64, err error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return 0, 0, fmt.Errorf("parse metrics: %w", err)
	}
	for _, m := range families[metric].GetMetric() {
		if keep != nil && !keep(labelsOf(m)) {
			continue
		}
		sum += m.GetHistogram().GetSampleSum()
		count += m.GetHistogram().GetSampleCount()
	}
	return sum, count, nil
}

func labelsOf(m *dto.Metric) map[string]string {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}

// HistogramQuantile reads Prometheus text from r and returns the upper
// bound of the bucket that holds quantile q of histogram metric, all its
// series merged, and how many observations it has. The bound is what a
// bucketed histogram can say: the quantile is at most that.
func HistogramQuantile(r io.Reader, metric string, q float64) (float64, uint64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return 0, 0, fmt.Errorf("parse metrics: %w", err)
	}
	f, ok := families[metric]
	if !ok {
		return 0, 0, nil
	}
	cum := map[float64]uint64{}
	var count uint64
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		count += h.GetSampleCount()
		for _, b := range h.GetBucket() {
			cum[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	if count == 0 {
		return 0, 0, nil
	}
	bounds := slices.Sorted(maps.Keys(cum))
	need := uint64(math.Ceil(q * float64(count)))
	for _, b := range bounds {
		if cum[b] >= need {
			return b, count, nil
		}
	}
	return math.Inf(1), count, nil
}
