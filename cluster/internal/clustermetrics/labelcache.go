package clustermetrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// labelCache keeps each GPU's label pairs from one scrape to the next and
// shares them among its series: at thousands of GPUs, building them anew
// for every series was the largest part of what a scrape allocated (the
// leader's heap in make bench). client_golang treats a metric's label
// pairs as immutable, so sharing them is safe. Its caller holds a lock.
type labelCache struct {
	gen   uint64
	pairs map[labelKey]*cachedPairs
}

type labelKey struct{ node, uuid, model string }

type cachedPairs struct {
	gen      uint64
	gpu, inv []*dto.LabelPair // (node, uuid) and (node, uuid, model)
}

// begin starts a scrape.
func (c *labelCache) begin() {
	c.gen++
	if c.pairs == nil {
		c.pairs = map[labelKey]*cachedPairs{}
	}
}

// of returns the pairs of one GPU, made with gpuDesc and invDesc (any
// descriptions with the labels (node, uuid) and (node, uuid, model)).
func (c *labelCache) of(gpuDesc, invDesc *prometheus.Desc, node, uuid, model string) *cachedPairs {
	k := labelKey{node, uuid, model}
	p, ok := c.pairs[k]
	if !ok {
		p = &cachedPairs{
			gpu: prometheus.MakeLabelPairs(gpuDesc, []string{node, uuid}),
			inv: prometheus.MakeLabelPairs(invDesc, []string{node, uuid, model}),
		}
		c.pairs[k] = p
	}
	p.gen = c.gen
	return p
}

// end forgets the GPUs this scrape did not see.
func (c *labelCache) end() {
	for k, p := range c.pairs {
		if p.gen != c.gen {
			delete(c.pairs, k)
		}
	}
}

// sharedGauge is a gauge whose label pairs are shared (labelCache).
type sharedGauge struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
}

func (g sharedGauge) Desc() *prometheus.Desc { return g.desc }

func (g sharedGauge) Write(m *dto.Metric) error {
	v := g.value
	m.Label = g.labels
	m.Gauge = &dto.Gauge{Value: &v}
	return nil
}
