package metricsserver

import (
	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The flags of Options.
const (
	FlagMetricsListen = "metrics-listen"
	FlagMetricsSecure = "metrics-secure"
	FlagProfiling     = "profiling"
)

// Options are where and to whom the process serves its metrics.
type Options struct {
	MetricsListen string // /metrics on every replica; "" disables
	// MetricsSecure serves it over HTTPS to callers the apiserver says may
	// get it (TokenReview, SubjectAccessReview); off: plain HTTP to anyone.
	MetricsSecure bool
	Profiling     bool // /debug/pprof on MetricsListen
}

// DefaultOptions serve :9090 to authorized scrapers only.
func DefaultOptions() Options { return Options{MetricsListen: ":9090", MetricsSecure: true} }

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagMetricsListen, Usage: "address of /metrics and /readyz (the readiness probe), served by every replica from start; empty disables", Value: o.MetricsListen, Destination: &o.MetricsListen},
		&cli.BoolFlag{Name: FlagMetricsSecure, Usage: "serve /metrics over HTTPS only to callers whose token may get it (TokenReview, SubjectAccessReview); false serves plain HTTP to anyone", Value: o.MetricsSecure, Destination: &o.MetricsSecure},
		&cli.BoolFlag{Name: FlagProfiling, Usage: "serve Go's /debug/pprof on the metrics address (for benchmarks and debugging)", Value: o.Profiling, Destination: &o.Profiling},
	}
}

// Validate reports what in o cannot work: nothing a flag's type lets
// through.
func (o Options) Validate() field.ErrorList { return nil }
