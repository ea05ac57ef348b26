// Package clustermetrics is the cluster role's Prometheus view: whether this
// replica leads, extender and webhook latency, bind outcomes, and per-GPU
// allocation read from the leader's books at scrape time. It is registered
// at process start, so a replica that does not lead reports vgpud_leader 0.
package clustermetrics

import (
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpud/vgpud/podmodel"
)

// Source is what the GPU gauges read at scrape time.
type Source interface {
	Usage() map[string]map[string]podmodel.Usage
	PodCount() int
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
	books    *gpuCollector
}

// New registers the cluster role's metrics on reg (main's registry, not
// the global default).
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		books: newGPUCollector(),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "vgpud_extender_request_seconds", Help: "Latency of scheduler-extender and webhook requests by verb.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1, 5, 15},
		}, []string{"verb"}),
		binds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vgpud_binds_total", Help: "Bind attempts by outcome (bound, failed).",
		}, []string{"outcome"}),
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
	}
	reg.MustRegister(m.latency, m.binds, m.leader, m.bindWait, m.podReads, m.refused, m.taken, m.books)
	return m
}

// Lead records that this replica leads with books as its GPU usage, until
// the returned func is called when leadership ends.
func (m *Metrics) Lead(books Source) (done func()) {
	m.books.set(books)
	m.leader.Set(1)
	return func() {
		m.leader.Set(0)
		m.books.set(nil)
	}
}

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

// Bind counts one bind by outcome and how long it waited for the node.
func (m *Metrics) Bind(ok bool, waited time.Duration) {
	outcome := "bound"
	if !ok {
		outcome = "failed"
	}
	m.binds.WithLabelValues(outcome).Inc()
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

// gpuCollector reads the books at scrape time, so the gauges never drift
// from them; it reports nothing while this replica does not lead.
type gpuCollector struct {
	mu  sync.Mutex
	src Source

	mem, cores, slots, pods, cacheNodes *prometheus.Desc
}

func (c *gpuCollector) set(src Source) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.src = src
}

func newGPUCollector() *gpuCollector {
	gpu := []string{"node", "uuid"}
	return &gpuCollector{
		mem:        prometheus.NewDesc("vgpud_gpu_allocated_memory_mib", "GPU memory committed to pods.", gpu, nil),
		cores:      prometheus.NewDesc("vgpud_gpu_allocated_cores", "GPU cores (percent) committed to pods.", gpu, nil),
		slots:      prometheus.NewDesc("vgpud_gpu_allocated_slots", "Split slots in use.", gpu, nil),
		pods:       prometheus.NewDesc("vgpud_cache_pods", "Pods holding GPUs in the leader's cache.", nil, nil),
		cacheNodes: prometheus.NewDesc("vgpud_cache_nodes", "Nodes in the leader's cache.", nil, nil),
	}
}

func (c *gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.mem, c.cores, c.slots, c.pods, c.cacheNodes} {
		ch <- d
	}
}

func (c *gpuCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	src := c.src
	c.mu.Unlock()
	if src == nil {
		return
	}
	usage := src.Usage()
	nodes := make([]string, 0, len(usage))
	for n := range usage {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		for uuid, u := range usage[n] {
			ch <- prometheus.MustNewConstMetric(c.mem, prometheus.GaugeValue, float64(u.MemMiB), n, uuid)
			ch <- prometheus.MustNewConstMetric(c.cores, prometheus.GaugeValue, float64(u.Cores), n, uuid)
			ch <- prometheus.MustNewConstMetric(c.slots, prometheus.GaugeValue, float64(u.Slots), n, uuid)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.pods, prometheus.GaugeValue, float64(src.PodCount()))
	ch <- prometheus.MustNewConstMetric(c.cacheNodes, prometheus.GaugeValue, float64(len(nodes)))
}
