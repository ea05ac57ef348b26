package nodemetrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpud/vgpud/node/internal/usage"
)

// usageCollector reports the latest sample of each container's GPU use;
// a container gone since is gone from the next scrape.
type usageCollector struct {
	mu   sync.Mutex
	last func() usage.Outcome

	used, limit, sm, cores, unattributed, orphaned *prometheus.Desc
}

func newUsageCollector() *usageCollector {
	// pod_name, not pod: Prometheus's scrape sets pod to the vgpud
	// replica's own (manifests/monitoring/scrape.yaml).
	l := []string{"namespace", "pod_name", "container", "uuid"}
	return &usageCollector{
		used:         prometheus.NewDesc("vgpud_node_container_gpu_memory_used_bytes", "GPU memory the container's processes hold on the GPU, as the driver reports it.", l, nil),
		limit:        prometheus.NewDesc("vgpud_node_container_gpu_memory_limit_bytes", "The container's slice of the GPU's memory (0 on a GPU it was not granted).", l, nil),
		sm:           prometheus.NewDesc("vgpud_node_container_gpu_sm_ratio", "The container's processes' share of the GPU's SM time over the last sample period, 0..1; absent where the driver gave no sample.", l, nil),
		cores:        prometheus.NewDesc("vgpud_node_container_gpu_cores_ratio", "The container's gpucores on the GPU, 0..1 (0: no share asked); SM time is reported, not held.", l, nil),
		unattributed: prometheus.NewDesc("vgpud_node_gpu_unattributed_memory_bytes", "GPU memory held by processes no granted container of this node owns (the host's, another runtime's, another node's).", []string{"uuid"}, nil),
		orphaned: prometheus.NewDesc("vgpud_node_gpu_orphaned_memory_bytes", "GPU memory listed under PIDs whose process ended (a child or another process holds the descriptor), by the namespace of the pod that opened it (\"\" for none): charged there until the driver frees it.",
			[]string{"uuid", "namespace"}, nil),
	}
}

func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.used, c.limit, c.sm, c.cores, c.unattributed, c.orphaned} {
		ch <- d
	}
}

func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	last := c.last
	c.mu.Unlock()
	if last == nil {
		return
	}
	v := last()
	// Two containers may share these labels for a while (a pod deleted
	// and made again under its name before the old one's processes end):
	// one series each, summed, or the scrape fails on the duplicate.
	type labels struct{ ns, pod, ctr, gpu string }
	type sums struct {
		used, limit uint64
		sm, cores   int
		smKnown     bool
	}
	byLabels := map[labels]*sums{}
	var order []labels
	for _, u := range v.Uses {
		l := labels{u.Container.Namespace, u.Container.Pod, u.Container.Name, u.GPU}
		s := byLabels[l]
		if s == nil {
			s = &sums{}
			byLabels[l] = s
			order = append(order, l)
		}
		s.used += u.UsedBytes
		s.limit = max(s.limit, u.LimitBytes)
		s.cores = max(s.cores, u.Cores)
		if u.SMPercent >= 0 {
			s.sm += u.SMPercent
			s.smKnown = true
		}
	}
	for _, l := range order {
		s, lv := byLabels[l], []string{l.ns, l.pod, l.ctr, l.gpu}
		ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(s.used), lv...)
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(s.limit), lv...)
		ch <- prometheus.MustNewConstMetric(c.cores, prometheus.GaugeValue, float64(s.cores)/100, lv...)
		if s.smKnown {
			ch <- prometheus.MustNewConstMetric(c.sm, prometheus.GaugeValue, float64(s.sm)/100, lv...)
		}
	}
	held := map[string]uint64{}
	type gpuNS struct{ uuid, ns string }
	orphaned := map[gpuNS]uint64{}
	for _, p := range v.Unattributed {
		held[p.GPU] += p.UsedBytes
	}
	for _, p := range v.Unattributed {
		if p.Orphaned {
			orphaned[gpuNS{p.GPU, p.Holder.Namespace}] += p.UsedBytes
		}
	}
	for _, u := range v.Uses {
		for _, p := range u.Processes {
			if p.Orphaned {
				orphaned[gpuNS{p.GPU, u.Container.Namespace}] += p.UsedBytes
			}
		}
	}
	for uuid, b := range held {
		ch <- prometheus.MustNewConstMetric(c.unattributed, prometheus.GaugeValue, float64(b), uuid)
	}
	for k, b := range orphaned {
		ch <- prometheus.MustNewConstMetric(c.orphaned, prometheus.GaugeValue, float64(b), k.uuid, k.ns)
	}
}

// usageMetrics are the enforcer's counters beside the collector.
type usageMetrics struct {
	kills  *prometheus.CounterVec
	sample prometheus.Histogram
}

func newUsageMetrics() usageMetrics {
	return usageMetrics{
		kills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vgpud_node_container_gpu_kills_total", Help: "Processes vgpud killed because their container held more GPU memory than its slice plus the margin.",
		}, []string{"namespace", "pod_name", "container", "uuid"}),
		sample: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vgpud_node_gpu_usage_sample_seconds", Help: "Time one sample of every GPU's processes took: NVML, attribution and decision.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .5},
		}),
	}
}

// ReportUsage has each scrape report what last says the latest sample showed.
func (m *Metrics) ReportUsage(last func() usage.Outcome) {
	m.usage.mu.Lock()
	defer m.usage.mu.Unlock()
	m.usage.last = last
}

// Killed counts one process killed for its container's memory.
func (m *Metrics) Killed(k usage.Kill) {
	c := k.Use.Container
	m.usageCounts.kills.WithLabelValues(c.Namespace, c.Pod, c.Name, k.Use.GPU).Inc()
}

// Sampled observes how long one sample took.
func (m *Metrics) Sampled(took time.Duration) { m.usageCounts.sample.Observe(took.Seconds()) }

// KillsFrom0 makes the kill counter of a granted container's GPU exist
// at 0, so that an increase() over it counts its first kill.
func (m *Metrics) KillsFrom0(namespace, pod, container, uuid string) {
	m.usageCounts.kills.WithLabelValues(namespace, pod, container, uuid)
}

// ForgetPod drops a gone pod's kill counters.
func (m *Metrics) ForgetPod(namespace, pod string) {
	m.usageCounts.kills.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "pod_name": pod})
}
