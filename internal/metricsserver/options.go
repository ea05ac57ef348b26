package metricsserver

import (
	"fmt"
	"net"

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

// ProbeMismatch says why the DaemonSet's readiness probe, an HTTPS GET of
// /readyz on the default listener's port (manifests/vgpud.yaml names it
// port metrics), cannot pass with o, or "" when it can.
func (o Options) ProbeMismatch() string {
	_, probed, _ := net.SplitHostPort(DefaultOptions().MetricsListen)
	switch {
	case o.MetricsListen == "":
		return "--metrics-listen is empty, so nothing serves /readyz"
	case !o.MetricsSecure:
		return "--metrics-secure is off, so /readyz is plain HTTP"
	}
	host, port, err := net.SplitHostPort(o.MetricsListen)
	switch {
	case err != nil:
		return fmt.Sprintf("--metrics-listen %q is not host:port", o.MetricsListen)
	case port != probed:
		return fmt.Sprintf("--metrics-listen %q is not port %s", o.MetricsListen, probed)
	case host != "" && host != "0.0.0.0" && host != "::":
		return fmt.Sprintf("--metrics-listen %q does not listen on the pod's address", o.MetricsListen)
	}
	return ""
}
