package main

import (
	"errors"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/cluster"
)

func clusterFlags(cfg *cluster.Config) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "lease-name", Usage: "Lease that elects the leader", EnvVars: envVar("lease-name"), Value: cfg.LeaseName, Destination: &cfg.LeaseName},
		&cli.StringFlag{Name: "lease-namespace", Usage: "namespace of the Lease; empty means this pod's namespace", EnvVars: envVar("lease-namespace"), Value: cfg.LeaseNamespace, Destination: &cfg.LeaseNamespace},
		&cli.DurationFlag{Name: "lease-duration", Usage: "how long followers wait before taking a silent leader's lease", EnvVars: envVar("lease-duration"), Value: cfg.LeaseDuration, Destination: &cfg.LeaseDuration},
		&cli.DurationFlag{Name: "lease-renew-deadline", Usage: "how long the leader retries renewing before it steps down", EnvVars: envVar("lease-renew-deadline"), Value: cfg.RenewDeadline, Destination: &cfg.RenewDeadline},
		&cli.DurationFlag{Name: "lease-retry-period", Usage: "wait between election attempts", EnvVars: envVar("lease-retry-period"), Value: cfg.RetryPeriod, Destination: &cfg.RetryPeriod},
		&cli.StringFlag{Name: "listen", Usage: "HTTPS address of the webhook and the scheduler extender", EnvVars: envVar("listen"), Value: cfg.ListenAddr, Destination: &cfg.ListenAddr},
		&cli.BoolFlag{Name: "profiling", Usage: "serve Go's /debug/pprof on the metrics address (for benchmarks and debugging)", EnvVars: envVar("profiling"), Value: cfg.Profiling, Destination: &cfg.Profiling},
		&cli.StringFlag{Name: "metrics-listen", Usage: "HTTP address of /metrics; empty disables", EnvVars: envVar("metrics-listen"), Value: cfg.MetricsAddr, Destination: &cfg.MetricsAddr},
		&cli.StringFlag{Name: "scheduler-name", Usage: "schedulerName of the kube-scheduler profile that calls the extender", EnvVars: envVar("scheduler-name"), Value: cfg.SchedulerName, Destination: &cfg.SchedulerName},
		&cli.StringFlag{Name: "node-policy", Usage: "default node policy: binpack or spread", EnvVars: envVar("node-policy"), Value: cfg.NodePolicy, Destination: &cfg.NodePolicy},
		&cli.IntFlag{Name: "default-gpumem-percentage", Usage: "GPU memory share given to a container that asks for neither gpumem nor gpumem-percentage", EnvVars: envVar("default-gpumem-percentage"), Value: cfg.DefaultMemPercent, Destination: &cfg.DefaultMemPercent},
		&cli.DurationFlag{Name: "bind-wait", Usage: "how long a bind waits for the node's previous pod to be allocated by kubelet", EnvVars: envVar("bind-wait"), Value: cfg.BindWait, Destination: &cfg.BindWait},
		&cli.StringFlag{Name: "gpu-policy", Usage: "default GPU policy: spread or binpack", EnvVars: envVar("gpu-policy"), Value: cfg.GPUPolicy, Destination: &cfg.GPUPolicy},
	}
}

func validateCluster(c cluster.Config) error {
	var errs []error
	add := func(flag string, value any, allowed string) { errs = append(errs, flagError(flag, value, allowed)) }
	if c.LeaseName == "" {
		add("lease-name", `""`, "want a Lease name such as vgpud-leader")
	}
	if c.LeaseDuration < time.Second || c.LeaseDuration%time.Second != 0 {
		// The Lease object stores its duration in whole seconds; 0 would
		// make every follower see the lease as expired at once.
		add("lease-duration", c.LeaseDuration, "want whole seconds, at least 1s")
	}
	if c.LeaseDuration <= c.RenewDeadline {
		add("lease-duration", c.LeaseDuration, "must be longer than --lease-renew-deadline ("+c.RenewDeadline.String()+")")
	}
	if c.RetryPeriod <= 0 || c.RenewDeadline <= c.RetryPeriod {
		add("lease-renew-deadline", c.RenewDeadline, "must be longer than --lease-retry-period ("+c.RetryPeriod.String()+"), which must be positive")
	}
	if c.ListenAddr == "" {
		add("listen", `""`, "want an address such as :9443")
	}
	if c.SchedulerName == "" {
		add("scheduler-name", `""`, "want the scheduler profile name, e.g. vgpud-scheduler")
	}
	if c.NodePolicy != cluster.PolicyBinpack && c.NodePolicy != cluster.PolicySpread {
		add("node-policy", c.NodePolicy, "want binpack or spread")
	}
	if c.GPUPolicy != cluster.PolicyBinpack && c.GPUPolicy != cluster.PolicySpread {
		add("gpu-policy", c.GPUPolicy, "want spread or binpack")
	}
	if c.BindWait <= 0 || c.BindWait > 5*time.Minute {
		add("bind-wait", c.BindWait, "want a duration above 0 and at most 5m, e.g. 10s")
	}
	if c.DefaultMemPercent < 1 || c.DefaultMemPercent > 100 {
		add("default-gpumem-percentage", c.DefaultMemPercent, "want 1..100")
	}
	return errors.Join(errs...)
}
