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
	sample func() []gpu.Sample

	util, used, total *prometheus.Desc
}

func newSamplesCollector() *samplesCollector {
	l := []string{"uuid"}
	return &samplesCollector{
		util:  prometheus.NewDesc("vgpud_node_gpu_utilization_percent", "Percent of the last NVML sample period in which the GPU's SMs were busy, whoever ran there.", l, nil),
		used:  prometheus.NewDesc("vgpud_node_gpu_memory_used_mib", "GPU memory in use, as NVML reports it.", l, nil),
		total: prometheus.NewDesc("vgpud_node_gpu_memory_total_mib", "GPU memory, as NVML reports it.", l, nil),
	}
}

func (c *samplesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.util
	ch <- c.used
	ch <- c.total
}

func (c *samplesCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sample := c.sample
	c.mu.Unlock()
	if sample == nil {
		return
	}
	for _, s := range sample() {
		ch <- prometheus.MustNewConstMetric(c.util, prometheus.GaugeValue, float64(s.UtilizationPercent), s.UUID)
		ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(s.MemoryUsedMiB), s.UUID)
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(s.MemoryTotalMiB), s.UUID)
	}
}

// SampleGPUs has each scrape report what sample reads from NVML.
func (m *Metrics) SampleGPUs(sample func() []gpu.Sample) {
	m.samples.mu.Lock()
	defer m.samples.mu.Unlock()
	m.samples.sample = sample
}
