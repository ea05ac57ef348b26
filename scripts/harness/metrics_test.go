package harness

import (
	"strings"
	"testing"
)

func TestMetricSums(t *testing.T) {
	text := `# TYPE vgpud_gpu_allocated_cores gauge
vgpud_gpu_allocated_cores{node="a",uuid="GPU-1"} 30
vgpud_gpu_allocated_cores{node="a",uuid="GPU-2"} 5
vgpud_gpu_allocated_cores{node="b",uuid="GPU-3"} 10
# TYPE vgpud_api_requests_total counter
vgpud_api_requests_total{resource="pods",verb="patch"} 2
vgpud_api_requests_total{resource="pods",verb="get"} 7
`
	byNode, ok, err := MetricSums(strings.NewReader(text), "vgpud_gpu_allocated_cores", func(l map[string]string) string { return l["node"] })
	if err != nil || !ok || len(byNode) != 2 || byNode["a"] != 35 || byNode["b"] != 10 {
		t.Fatalf("by node: %v, %v, %v", byNode, ok, err)
	}
	all, ok, err := MetricSums(strings.NewReader(text), "vgpud_api_requests_total", nil)
	if err != nil || !ok || all[""] != 9 {
		t.Fatalf("all: %v, %v, %v", all, ok, err)
	}
	if _, ok, err := MetricSums(strings.NewReader(text), "vgpud_binds_total", nil); ok || err != nil {
		t.Fatalf("a metric not there: ok %v, %v", ok, err)
	}
	if _, _, err := MetricSums(strings.NewReader("not a metric line {"), "x", nil); err == nil {
		t.Fatal("malformed text: want an error")
	}
}

func TestHistogramTotals(t *testing.T) {
	text := `# TYPE vgpud_extender_request_seconds histogram
vgpud_extender_request_seconds_bucket{verb="webhook",le="0.001"} 2
vgpud_extender_request_seconds_bucket{verb="webhook",le="+Inf"} 3
vgpud_extender_request_seconds_sum{verb="webhook"} 0.0045
vgpud_extender_request_seconds_count{verb="webhook"} 3
vgpud_extender_request_seconds_bucket{verb="filter",le="+Inf"} 5
vgpud_extender_request_seconds_sum{verb="filter"} 0.5
vgpud_extender_request_seconds_count{verb="filter"} 5
`
	sum, n, err := HistogramTotals(strings.NewReader(text), "vgpud_extender_request_seconds", func(l map[string]string) bool { return l["verb"] == "webhook" })
	if err != nil || n != 3 || sum != 0.0045 {
		t.Fatalf("webhook: %v %d %v", sum, n, err)
	}
	if sum, n, err = HistogramTotals(strings.NewReader(text), "vgpud_extender_request_seconds", nil); err != nil || n != 8 || sum != 0.5045 {
		t.Fatalf("all: %v %d %v", sum, n, err)
	}
	if sum, n, err = HistogramTotals(strings.NewReader(text), "absent_seconds", nil); err != nil || n != 0 || sum != 0 {
		t.Fatalf("a metric not there: %v %d %v", sum, n, err)
	}
	if _, _, err := HistogramTotals(strings.NewReader("not a metric line {"), "x", nil); err == nil {
		t.Fatal("malformed text: want an error")
	}
}
