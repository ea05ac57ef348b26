package main

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// buildInfo is vgpud_build_info: always 1, its labels the release a
// replica runs, so a rollout's progress and a mixed-version cluster show
// in one query (count by (version) (vgpud_build_info)).
func buildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vgpud_build_info", Help: "1, labelled with the version, commit and Go version this replica was built from.",
	}, []string{"version", "commit", "goversion"})
	g.WithLabelValues(version, commit, runtime.Version()).Set(1)
	return g
}
