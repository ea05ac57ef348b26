// Package nodemetrics is the node role's Prometheus view: registrations with
// kubelet, Allocate latency and outcomes, and GPU health. Every replica
// serves it from process start.
package nodemetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpud/vgpud/node/internal/nrihook"
)

// Allocate's outcomes.
const (
	allocated = "allocated"
	refused   = "refused"
)

// Metrics are the node role's collectors.
type Metrics struct {
	registrations *prometheus.CounterVec
	allocate      *prometheus.HistogramVec
	healthy       *prometheus.GaugeVec
	mismatches    prometheus.Counter
	hook          *prometheus.HistogramVec
	identity      *prometheus.GaugeVec
	failsClosed   *prometheus.GaugeVec
	samples       *samplesCollector
	usage         *usageCollector
	usageCounts   usageMetrics
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
	m.hook = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "vgpud_node_runtime_hook_seconds", Help: "Time the NRI hook took to decide a container as the runtime created it, by verdict (grant, void, exempt, keep, refuse).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .05, .1, .5, 1, 2},
	}, []string{"verdict"})
	m.identity = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vgpud_node_identity", Help: "1 for how this node tells which pod a container is: runtime (the NRI hook is told) or guessed (no NRI socket: Allocate guesses the pod kubelet admits).",
	}, []string{"mode"})
	// No labels, but a vector: the series is absent until the first
	// check, and stays absent where --runtime-config is empty, so the
	// alert on 0 never fires for a check turned off.
	m.failsClosed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vgpud_node_runtime_fails_closed", Help: "1 while the container runtime's configuration, read every minute, makes it refuse containers vgpud's NRI hook did not see; 0 while it fails open or cannot be read (vgpud inspect says why). Absent where --runtime-config is empty.",
	}, nil)
	m.samples = newSamplesCollector()
	m.usage, m.usageCounts = newUsageCollector(), newUsageMetrics()
	// Every outcome and verdict from the start at 0, so that the first
	// observation shows in a rate, and a rate over them is 0, not no data.
	for _, o := range []string{allocated, refused} {
		m.allocate.WithLabelValues(o)
	}
	for _, v := range []nrihook.Action{nrihook.Void, nrihook.Grant, nrihook.Exempt, nrihook.Refuse} {
		m.hook.WithLabelValues(v.String())
	}
	reg.MustRegister(m.registrations, m.allocate, m.healthy, m.mismatches, m.hook, m.identity, m.failsClosed, m.samples, m.usage, m.usageCounts.kills, m.usageCounts.sample)
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
	outcome := allocated
	if !ok {
		outcome = refused
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

// ForgetGPUs drops the series of GPUs that left the node.
func (m *Metrics) ForgetGPUs(uuids []string) {
	for _, u := range uuids {
		m.healthy.DeleteLabelValues(u)
	}
}

// PodResourcesMismatch counts one pod whose kubelet devices disagree with
// its assignment.
func (m *Metrics) PodResourcesMismatch() { m.mismatches.Inc() }

// RuntimeHook records one container decided by the NRI hook.
func (m *Metrics) RuntimeHook(verdict string, took time.Duration) {
	m.hook.WithLabelValues(verdict).Observe(took.Seconds())
}

// Identity sets how the node tells which pod a container is.
func (m *Metrics) Identity(mode string) {
	for _, k := range []string{"runtime", "guessed"} {
		v := 0.0
		if k == mode {
			v = 1
		}
		m.identity.WithLabelValues(k).Set(v)
	}
}

// RuntimeFailsClosed sets whether the runtime was seen to fail closed.
func (m *Metrics) RuntimeFailsClosed(closed bool) {
	v := 0.0
	if closed {
		v = 1
	}
	m.failsClosed.WithLabelValues().Set(v)
}
