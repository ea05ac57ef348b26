// Package clustermetrics is the cluster role's Prometheus view: whether this
// replica leads, extender and webhook latency, bind outcomes, and per-GPU
// allocation read from the leader's books at scrape time. It is registered
// at process start, so a replica that does not lead reports vgpud_leader 0.
package clustermetrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpud/vgpud/cluster/internal/books"
	"github.com/vgpud/vgpud/cluster/internal/extender"
	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/leader"
	"github.com/vgpud/vgpud/cluster/internal/server/certs"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// BookStats is what the GPU, node and namespace gauges read at scrape time:
// the leader's books.
type BookStats interface {
	Stats() []books.NodeStats
	PodCount() int
	Charged() map[string]podmodel.Usage
}

// QuotaStats gives each namespace's hard vGPU limits.
type QuotaStats interface {
	AllLimits() map[string]podmodel.Quota
}

// Metrics are the cluster role's collectors.
type Metrics struct {
	latency  *prometheus.HistogramVec
	binds    *prometheus.CounterVec
	leader   prometheus.Gauge
	bindWait prometheus.Histogram
	podReads *prometheus.CounterVec
	refused  *prometheus.CounterVec
	taken    prometheus.Counter
	acquired prometheus.Counter
	changes  *prometheus.CounterVec
	filters  *prometheus.CounterVec
	refusals *prometheus.CounterVec
	caSteps  *prometheus.CounterVec
	expiry   *prometheus.GaugeVec
	settings *prometheus.CounterVec
	books    *booksCollector
}

// New registers the cluster role's metrics on reg (main's registry, not
// the global default).
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		books: newBooksCollector(),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "vgpud_extender_request_seconds", Help: "Latency of scheduler-extender and webhook requests by verb.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1, 5, 15},
		}, []string{"verb"}),
		binds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vgpud_binds_total", Help: "Bind attempts by outcome and reason: bound; refused, the pod's own doing (quota, pod_changed, not_bindable); failed, vgpud's or the cluster's (no_longer_fits, node_busy, in_progress, not_leader, unanswered, api_error).",
		}, []string{"outcome", "reason"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vgpud_leader", Help: "1 while this replica leads."}),
		bindWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vgpud_bind_wait_seconds", Help: "Time a bind waited for the node's previous pod to be allocated by kubelet.",
			Buckets: []float64{0, .01, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		podReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vgpud_extender_pod_reads_total", Help: "Pods filter and prioritize read, by where from: informer (the leader's record of that very version) or body (decoded from the request).",
		}, []string{"from"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vgpud_http_refused_total", Help: "Requests answered 429 because others in flight held the listener's share of memory or concurrency, by listener (webhook, extender).",
		}, []string{"listener"}),
		taken: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vgpud_leader_lease_taken_total", Help: "Times another replica took the leader Lease while this replica's hold was still current: never in turn, so a node may be compromised.",
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vgpud_leader_changes_total", Help: "Times this replica took the leader Lease, by how: first (it created the Lease), handoff (its previous holder released it), expired (the previous holder's hold ran out unrenewed: a crash, a partition, or a replica kept from renewing).",
		}, []string{"how"}),
		acquired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vgpud_leader_acquired_total", Help: "Times this replica became the leader: a rise anywhere but at the first start is a failover.",
		}),
		filters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vgpud_filter_pods_total", Help: "Pods kube-scheduler asked the extender to filter, by outcome (fits: some node fits; unschedulable: none does; invalid: the pod's request cannot be read).",
		}, []string{"outcome"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vgpud_filter_node_refusals_total", Help: "Nodes the extender's filter refused a pod, by reason (insufficient gpumem, no free slot, device plugin not serving, ...).",
		}, []string{"reason"}),
		caSteps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vgpud_ca_rotation_steps_total", Help: "Steps of a CA rotation this leader took (trusted: the next CA trusted beside the current one; signing: it signs; retired: the old one is gone).",
		}, []string{"step"}),
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vgpud_certificate_expiry_timestamp_seconds", Help: "When each certificate the leader keeps in its Secret expires (ca, serving, client), as a Unix time.",
		}, []string{"certificate"}),
	}
	// Every known outcome and step from the start at 0, so a rate or an
	// increase over them is 0 rather than no data until one happens.
	for outcome, reasons := range extender.BindReasons {
		for _, reason := range reasons {
			m.binds.WithLabelValues(outcome, reason)
		}
	}
	for _, o := range []string{extender.FilterFits, extender.FilterUnschedulable, extender.FilterInvalid} {
		m.filters.WithLabelValues(o)
	}
	m.settings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vgpud_cluster_settings_loads_total", Help: "Readings of the cluster settings file (the vgpud ConfigMap's cluster-settings.yaml) by this replica that changed what is in force (applied) or were refused for a bad value (refused; the settings in force stay and the log says why). Every replica follows the file; the leader's count is the one that places pods.",
	}, []string{"outcome"})
	for _, o := range []string{"applied", "refused"} {
		m.settings.WithLabelValues(o)
	}
	for _, step := range []string{certs.StepTrusted, certs.StepSigning, certs.StepRetired} {
		m.caSteps.WithLabelValues(step)
	}
	// From zero, so that increase() sees the first change.
	for _, how := range []string{leader.ChangeFirst, leader.ChangeHandoff, leader.ChangeExpired} {
		m.changes.WithLabelValues(how)
	}
	reg.MustRegister(m.latency, m.binds, m.leader, m.bindWait, m.podReads, m.refused, m.taken, m.acquired, m.changes, m.filters, m.refusals, m.caSteps, m.expiry, m.settings, m.books)
	return m
}

// SettingsLoaded counts one reading of the cluster settings file that
// was applied or refused.
func (m *Metrics) SettingsLoaded(applied bool) {
	o := "refused"
	if applied {
		o = "applied"
	}
	m.settings.WithLabelValues(o).Inc()
}

// Lead records that this replica leads with b as its books and q as the
// namespaces' limits, until the returned func is called when leadership
// ends.
func (m *Metrics) Lead(b BookStats, q QuotaStats) (done func()) {
	m.books.set(b, q)
	m.leader.Set(1)
	m.acquired.Inc()
	return func() {
		m.leader.Set(0)
		m.books.set(nil, nil)
		m.expiry.Reset()
	}
}

// Filtered counts one filter answered, and each node's refusal by reason.
func (m *Metrics) Filtered(outcome string, reasons map[string]fit.Reason) {
	m.filters.WithLabelValues(outcome).Inc()
	if len(reasons) == 0 {
		return
	}
	byKind := map[string]int{}
	for _, r := range reasons {
		byKind[r.Kind]++
	}
	for kind, n := range byKind {
		m.refusals.WithLabelValues(kind).Add(float64(n))
	}
}

// Certificates records when the leader's certificates expire.
func (m *Metrics) Certificates(ca, serving, client time.Time) {
	m.expiry.WithLabelValues("ca").Set(float64(ca.Unix()))
	m.expiry.WithLabelValues("serving").Set(float64(serving.Unix()))
	m.expiry.WithLabelValues("client").Set(float64(client.Unix()))
}

// RotationStep counts one step of a CA rotation.
func (m *Metrics) RotationStep(step string) { m.caSteps.WithLabelValues(step).Inc() }

// LeaderChange counts this replica taking the Lease, by how
// (leader.ChangeOf).
func (m *Metrics) LeaderChange(how string) { m.changes.WithLabelValues(how).Inc() }

// LeaseTaken counts a Lease taken from this replica out of turn.
func (m *Metrics) LeaseTaken(_, _ string) { m.taken.Inc() }

// Refused returns the counter of requests listener refused for load.
func (m *Metrics) Refused(listener string) func() { return m.refused.WithLabelValues(listener).Inc }

// Instrument times every request to h under verb.
func (m *Metrics) Instrument(verb string, h http.Handler) http.Handler {
	obs := m.latency.WithLabelValues(verb)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		obs.Observe(time.Since(start).Seconds())
	})
}

// Bind counts one bind by outcome and reason (extender.BindReasons) and
// how long it waited for the node.
func (m *Metrics) Bind(outcome, reason string, waited time.Duration) {
	m.binds.WithLabelValues(outcome, reason).Inc()
	m.bindWait.Observe(waited.Seconds())
}

// PodRead counts one pod filter or prioritize read, from the informer
// or decoded from the request body.
func (m *Metrics) PodRead(fromInformer bool) {
	from := "body"
	if fromInformer {
		from = "informer"
	}
	m.podReads.WithLabelValues(from).Inc()
}
