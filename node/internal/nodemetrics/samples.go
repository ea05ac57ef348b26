package nodemetrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpud/vgpud/node/internal/gpu"
)

// samplesCollector asks NVML for each GPU's use at scrape time; it
// reports nothing until the node role has opened its GPUs.
type samplesCollector struct {
	mu     sync.Mutex
	sample func() []gpu.UtilSample

	// Each under its name in base units and, for one release, its old
	// name in percent or MiB.
	util, used, total, oldUtil, oldUsed, oldTotal *prometheus.Desc
}

const bytesPerMiB = 1 << 20

func newSamplesCollector() *samplesCollector {
	l := []string{"uuid"}
	deprecated := func(name, now string) *prometheus.Desc {
		return prometheus.NewDesc(name, "Deprecated: "+now+" in the old unit; removed in the next release.", l, nil)
	}
	return &samplesCollector{
		util:     prometheus.NewDesc("vgpud_node_gpu_utilization_ratio", "Share of the last NVML sample period in which the GPU's SMs were busy, whoever ran there, 0..1.", l, nil),
		used:     prometheus.NewDesc("vgpud_node_gpu_memory_used_bytes", "GPU memory in use, as NVML reports it.", l, nil),
		total:    prometheus.NewDesc("vgpud_node_gpu_memory_total_bytes", "GPU memory, as NVML reports it.", l, nil),
		oldUtil:  deprecated("vgpud_node_gpu_utilization_percent", "vgpud_node_gpu_utilization_ratio"),
		oldUsed:  deprecated("vgpud_node_gpu_memory_used_mib", "vgpud_node_gpu_memory_used_bytes"),
		oldTotal: deprecated("vgpud_node_gpu_memory_total_mib", "vgpud_node_gpu_memory_total_bytes"),
	}
}

func (c *samplesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.util, c.used, c.total, c.oldUtil, c.oldUsed, c.oldTotal} {
		ch <- d
	}
}

func (c *samplesCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sample := c.sample
	c.mu.Unlock()
	if sample == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, uuid string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, uuid)
	}
	for _, s := range sample() {
		gauge(c.util, float64(s.UtilizationPercent)/100, s.UUID)
		gauge(c.used, float64(s.MemoryUsedMiB)*bytesPerMiB, s.UUID)
		gauge(c.total, float64(s.MemoryTotalMiB)*bytesPerMiB, s.UUID)
		gauge(c.oldUtil, float64(s.UtilizationPercent), s.UUID)
		gauge(c.oldUsed, float64(s.MemoryUsedMiB), s.UUID)
		gauge(c.oldTotal, float64(s.MemoryTotalMiB), s.UUID)
	}
}

// SampleGPUs has each scrape report what sample reads from NVML.
func (m *Metrics) SampleGPUs(sample func() []gpu.UtilSample) {
	m.samples.mu.Lock()
	defer m.samples.mu.Unlock()
	m.samples.sample = sample
}
