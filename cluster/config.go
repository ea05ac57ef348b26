package cluster

import "time"

// Config is the cluster role's settings.
type Config struct {
	LeaseName      string
	LeaseNamespace string
	LeaseDuration  time.Duration
	RenewDeadline  time.Duration
	RetryPeriod    time.Duration
	ListenAddr     string // HTTPS: webhook and extender
	MetricsAddr    string // plain HTTP: Prometheus
	Profiling      bool   // /debug/pprof on MetricsAddr
	SchedulerName  string
	NodePolicy     string // binpack | spread
	GPUPolicy      string // spread | binpack
	// DefaultMemPercent is the GPU memory share of a container that names
	// neither gpumem nor gpumem-percentage; 100 = the whole card.
	DefaultMemPercent int
	// BindWait bounds how long a bind waits for the node's previous pod to
	// be allocated by kubelet before giving up (the scheduler retries).
	BindWait time.Duration
}

// Policies.
const (
	PolicyBinpack = "binpack"
	PolicySpread  = "spread"
)

// DefaultConfig returns the settings vgpud runs with when no flag is given.
func DefaultConfig() Config {
	return Config{
		LeaseName:      "vgpud-leader",
		LeaseNamespace: "vgpud-system",
		LeaseDuration:  4 * time.Second,
		RenewDeadline:  3 * time.Second,
		RetryPeriod:    500 * time.Millisecond,
		ListenAddr:     ":9443",
		MetricsAddr:    ":9090",
		SchedulerName:  "vgpud-scheduler",
		NodePolicy:     PolicyBinpack,
		GPUPolicy:      PolicySpread,

		DefaultMemPercent: 100,
		BindWait:          10 * time.Second,
	}
}
