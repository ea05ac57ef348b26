// Package nodemetrics is the node role's Prometheus view: registrations with
// kubelet, Allocate latency and outcomes, and GPU health. Every replica
// serves it from process start.
package nodemetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the node role's collectors.
type Metrics struct {
	registrations *prometheus.CounterVec
	allocate      *prometheus.HistogramVec
	healthy       *prometheus.GaugeVec
	mismatches    prometheus.Counter
}

// New registers the node role's metrics on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vgpud_node_registrations_total", Help: "Device-plugin registrations with kubelet by outcome (ok, failed).",
		}, []string{"outcome"}),
		allocate: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "vgpud_node_allocate_seconds", Help: "Latency of kubelet's Allocate calls by outcome (allocated, refused).",
			Buckets: []float64{.0001, .0005, .001, .005, .01, .05, .1, .5, 1, 5, 10},
		}, []string{"outcome"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vgpud_node_gpu_healthy", Help: "1 while the GPU is offered to kubelet, 0 while an XID or a failing NVML query keeps it out.",
		}, []string{"uuid"}),
	}
	m.mismatches = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "vgpud_node_podresources_mismatches_total", Help: "Pods whose devices in kubelet's PodResources API are not slices of their assigned GPUs.",
	})
	reg.MustRegister(m.registrations, m.allocate, m.healthy, m.mismatches)
	return m
}

// Registered counts one registration attempt.
func (m *Metrics) Registered(err error) {
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	m.registrations.WithLabelValues(outcome).Inc()
}

// Allocated records one Allocate call.
func (m *Metrics) Allocated(ok bool, took time.Duration) {
	outcome := "allocated"
	if !ok {
		outcome = "refused"
	}
	m.allocate.WithLabelValues(outcome).Observe(took.Seconds())
}

// Health sets each GPU's health.
func (m *Metrics) Health(uuids []string, unhealthy map[string]bool) {
	for _, u := range uuids {
		v := 1.0
		if unhealthy[u] {
			v = 0
		}
		m.healthy.WithLabelValues(u).Set(v)
	}
}

// PodResourcesMismatch counts one pod whose kubelet devices disagree with
// its assignment.
func (m *Metrics) PodResourcesMismatch() { m.mismatches.Inc() }
