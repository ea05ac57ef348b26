package clustermetrics

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/vgpud/vgpud/protocol/podmodel"
)

// booksCollector reads the books at scrape time, so the gauges never
// drift from them; it reports nothing while this replica does not lead.
type booksCollector struct {
	mu     sync.Mutex
	books  BookStats
	quotas QuotaStats
	// scrape serialises Collect, which keeps labels between scrapes.
	scrape sync.Mutex
	labels labelCache

	mem, cores, capMem, capCores      renamed
	slots, capSlots, healthy, serving *prometheus.Desc
	cordoned, migInstance             *prometheus.Desc
	held, full                        *prometheus.Desc
	pods, cacheNodes                  *prometheus.Desc
	// The namespace quota, one metric per unit; quotaLimit and quotaUsed
	// are the old pair that mixed MiB and percent under a resource label.
	memLimit, memUsed, coresLimit, coresUsed *prometheus.Desc
	quotaLimit, quotaUsed                    *prometheus.Desc
}

func (c *booksCollector) set(b BookStats, q QuotaStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.books, c.quotas = b, q
}

func newBooksCollector() *booksCollector {
	gpu := []string{"node", "uuid"}
	inv := []string{"node", "uuid", "model"}
	ns := []string{"namespace"}
	old := []string{"namespace", "resource"}
	return &booksCollector{
		mem:      rename("vgpud_gpu_allocated_memory_bytes", "GPU memory committed to pods.", "vgpud_gpu_allocated_memory_mib", bytesPerMiB, gpu),
		cores:    rename("vgpud_gpu_allocated_cores_ratio", "Share of the GPU's cores committed to pods (gpucores), 0..1.", "vgpud_gpu_allocated_cores", ratioPerCore, gpu),
		slots:    prometheus.NewDesc("vgpud_gpu_allocated_slots", "Split slots in use.", gpu, nil),
		capMem:   rename("vgpud_gpu_capacity_memory_bytes", "GPU memory, as the node's inventory says.", "vgpud_gpu_capacity_memory_mib", bytesPerMiB, inv),
		capCores: rename("vgpud_gpu_capacity_cores_ratio", "Share of the GPU's cores there is to commit: 1.", "vgpud_gpu_capacity_cores", ratioPerCore, inv),
		capSlots: prometheus.NewDesc("vgpud_gpu_capacity_slots", "Slots the GPU is split into (--split).", inv, nil),
		healthy:  prometheus.NewDesc("vgpud_gpu_healthy", "1 while the node role offers the GPU, 0 while an XID or a failing NVML query keeps it out.", inv, nil),
		cordoned: prometheus.NewDesc("vgpud_gpu_cordoned", "1 while an operator keeps the GPU out of new placements (the node's vgpud.io/cordon), 0 while not.", inv, nil),
		held:     prometheus.NewDesc("vgpud_gpu_held_memory_bytes", "GPU memory the GPU holds beyond the slices booked on it, as its node last reported (vgpud.io/usage): counted as used when pods are placed. Shared GPUs only.", gpu, nil),
		full:     prometheus.NewDesc("vgpud_gpu_full", "1 while the GPU's node reports its processes hold all its memory, so nothing more is placed there; 0 while not. Shared GPUs only.", inv, nil),
		migInstance: prometheus.NewDesc("vgpud_gpu_mig_instance", "1 for each MIG instance among the GPUs (uuid), with the GPU it is part of (gpu) and its profile; what is booked on it and what it has are under its uuid.",
			[]string{"node", "uuid", "gpu", "profile"}, nil),
		serving:    prometheus.NewDesc("vgpud_cluster_node_serving", "1 while vgpud serves the node's GPUs: its inventory read, and its device plugin registered with kubelet and serving (the leader places pods there) or its DRA driver serving claims; 0 while not.", []string{"node"}, nil),
		memLimit:   prometheus.NewDesc("vgpud_namespace_quota_memory_limit_bytes", "The namespace's hard quota of GPU memory (requests.nvidia.com/gpumem).", ns, nil),
		memUsed:    prometheus.NewDesc("vgpud_namespace_quota_memory_used_bytes", "GPU memory the namespace's booked pods are charged, as bind counts it against the quota.", ns, nil),
		coresLimit: prometheus.NewDesc("vgpud_namespace_quota_cores_limit_ratio", "The namespace's hard quota of GPU cores (requests.nvidia.com/gpucores) in GPUs: 1 is one whole GPU's cores.", ns, nil),
		coresUsed:  prometheus.NewDesc("vgpud_namespace_quota_cores_used_ratio", "GPU cores the namespace's booked pods are charged in GPUs, as bind counts them against the quota.", ns, nil),
		quotaLimit: prometheus.NewDesc("vgpud_namespace_quota_limit", "Deprecated: vgpud_namespace_quota_memory_limit_bytes and _cores_limit_ratio (gpumem in MiB, gpucores in percent); removed in the next release.", old, nil),
		quotaUsed:  prometheus.NewDesc("vgpud_namespace_quota_used", "Deprecated: vgpud_namespace_quota_memory_used_bytes and _cores_used_ratio (gpumem in MiB, gpucores in percent); removed in the next release.", old, nil),
		pods:       prometheus.NewDesc("vgpud_cache_pods", "Pods holding GPUs in the leader's cache.", nil, nil),
		cacheNodes: prometheus.NewDesc("vgpud_cache_nodes", "Nodes with vgpud in the leader's cache.", nil, nil),
	}
}

func (c *booksCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, r := range []renamed{c.mem, c.cores, c.capMem, c.capCores} {
		r.describe(ch)
	}
	for _, d := range []*prometheus.Desc{c.slots, c.capSlots, c.healthy, c.cordoned, c.held, c.full, c.migInstance, c.serving, c.memLimit, c.memUsed, c.coresLimit, c.coresUsed, c.quotaLimit, c.quotaUsed, c.pods, c.cacheNodes} {
		ch <- d
	}
}

func (c *booksCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	b, q := c.books, c.quotas
	c.mu.Unlock()
	if b == nil {
		// Not leading: nothing to report, and no GPU's labels to keep.
		c.scrape.Lock()
		c.labels = labelCache{}
		c.scrape.Unlock()
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	shared := func(d *prometheus.Desc, v float64, labels []*dto.LabelPair) {
		ch <- sharedGauge{desc: d, labels: labels, value: v}
	}
	c.scrape.Lock()
	defer c.scrape.Unlock()
	c.labels.begin()
	defer c.labels.end()
	stats := b.Stats()
	for _, n := range stats {
		gauge(c.serving, boolValue(n.Serving), n.Name)
		for _, g := range n.GPUs {
			if g.MIG != nil && g.MIG.OnDemand && !g.MIG.Made && g.Used.Idle() {
				// One of the instances a node could make, none made or
				// booked: its capacity is its GPU's, counted once by
				// those that are.
				continue
			}
			// Values reach the labels unchecked here; client_golang
			// still checks them (UTF-8) when it gathers.
			l := c.labels.of(c.slots, c.capSlots, n.Name, g.UUID, g.Model)
			c.mem.emitShared(ch, float64(g.Used.MemMiB), l.gpu)
			c.cores.emitShared(ch, float64(g.Used.Cores), l.gpu)
			shared(c.slots, float64(g.Used.Slots), l.gpu)
			c.capMem.emitShared(ch, float64(g.MemoryMiB), l.inv)
			c.capCores.emitShared(ch, float64(g.Cores), l.inv)
			shared(c.capSlots, float64(g.Split), l.inv)
			shared(c.healthy, boolValue(g.Healthy), l.inv)
			shared(c.cordoned, boolValue(g.Cordoned), l.inv)
			if g.MIG != nil {
				gauge(c.migInstance, 1, n.Name, g.UUID, g.MIG.GPU, g.MIG.Profile)
				continue
			}
			shared(c.held, float64(g.Held)*bytesPerMiB, l.gpu)
			shared(c.full, boolValue(g.Full), l.inv)
		}
	}
	charged := b.Charged()
	var limits map[string]podmodel.Quota
	if q != nil {
		limits = q.AllLimits()
	}
	names := make([]string, 0, len(charged)+len(limits))
	for ns := range charged {
		names = append(names, ns)
	}
	for ns := range limits {
		if _, ok := charged[ns]; !ok {
			names = append(names, ns)
		}
	}
	sort.Strings(names)
	for _, ns := range names {
		u := charged[ns]
		gauge(c.memUsed, float64(u.MemMiB)*bytesPerMiB, ns)
		gauge(c.coresUsed, float64(u.Cores)*ratioPerCore, ns)
		gauge(c.quotaUsed, float64(u.MemMiB), ns, "gpumem")
		gauge(c.quotaUsed, float64(u.Cores), ns, "gpucores")
		l := limits[ns]
		if l.Memory.Set {
			gauge(c.memLimit, float64(l.Memory.Hard)*bytesPerMiB, ns)
			gauge(c.quotaLimit, float64(l.Memory.Hard), ns, "gpumem")
		}
		if l.Cores.Set {
			gauge(c.coresLimit, float64(l.Cores.Hard)*ratioPerCore, ns)
			gauge(c.quotaLimit, float64(l.Cores.Hard), ns, "gpucores")
		}
	}
	gauge(c.pods, float64(b.PodCount()))
	gauge(c.cacheNodes, float64(len(stats)))
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
