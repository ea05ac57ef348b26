package clustermetrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Units the renamed gauges convert from: the books count memory in MiB
// and cores in percent of a GPU; Prometheus asks for bytes and ratios.
const (
	bytesPerMiB  = 1 << 20
	ratioPerCore = 0.01
)

// renamed is a gauge exported under its name in base units and, for one
// release, under the name it had before in the books' own units, so that
// dashboards and alerts written against the old name keep working while
// they move (docs/monitoring.md lists both).
type renamed struct {
	now, old *prometheus.Desc
	// perOld is what one of the old unit is in the new: bytesPerMiB,
	// ratioPerCore.
	perOld float64
}

func rename(name, help, oldName string, perOld float64, labels []string) renamed {
	return renamed{
		now:    prometheus.NewDesc(name, help, labels, nil),
		old:    prometheus.NewDesc(oldName, "Deprecated: "+name+" in the old unit; removed in the next release.", labels, nil),
		perOld: perOld,
	}
}

func (r renamed) describe(ch chan<- *prometheus.Desc) {
	ch <- r.now
	ch <- r.old
}

// emit sends v, given in the old unit, under both names.
func (r renamed) emit(ch chan<- prometheus.Metric, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(r.now, prometheus.GaugeValue, v*r.perOld, labels...)
	ch <- prometheus.MustNewConstMetric(r.old, prometheus.GaugeValue, v, labels...)
}

// emitShared is emit with label pairs shared among series (labelCache).
func (r renamed) emitShared(ch chan<- prometheus.Metric, v float64, labels []*dto.LabelPair) {
	ch <- sharedGauge{desc: r.now, labels: labels, value: v * r.perOld}
	ch <- sharedGauge{desc: r.old, labels: labels, value: v}
}
