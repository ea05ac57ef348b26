package main

import (
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/cluster"
	"github.com/vgpud/vgpud/cluster/fit"
	"github.com/vgpud/vgpud/protocol"
)

func clusterFlags(cfg *cluster.Config) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "lease-name", Usage: "Lease that elects the leader", EnvVars: envVar("lease-name"), Value: cfg.LeaseName, Destination: &cfg.LeaseName},
		&cli.StringFlag{Name: "lease-namespace", Usage: "namespace of the Lease; empty means this pod's namespace", EnvVars: envVar("lease-namespace"), Value: cfg.LeaseNamespace, Destination: &cfg.LeaseNamespace},
		&cli.DurationFlag{Name: "lease-duration", Usage: "how long followers wait before taking a silent leader's lease", EnvVars: envVar("lease-duration"), Value: cfg.LeaseDuration, Destination: &cfg.LeaseDuration},
		&cli.DurationFlag{Name: "lease-renew-deadline", Usage: "how long the leader retries renewing before it steps down", EnvVars: envVar("lease-renew-deadline"), Value: cfg.LeaseRenewDeadline, Destination: &cfg.LeaseRenewDeadline},
		&cli.DurationFlag{Name: "lease-retry-period", Usage: "wait between election attempts", EnvVars: envVar("lease-retry-period"), Value: cfg.LeaseRetryPeriod, Destination: &cfg.LeaseRetryPeriod},
		&cli.StringFlag{Name: "listen", Usage: "HTTPS address of the webhook and the /healthz and /readyz probes", EnvVars: envVar("listen"), Value: cfg.Listen, Destination: &cfg.Listen},
		&cli.StringFlag{Name: "extender-listen", Usage: "HTTPS address of the scheduler extender; callers must present kube-scheduler's client certificate from the TLS Secret", EnvVars: envVar("extender-listen"), Value: cfg.ExtenderListen, Destination: &cfg.ExtenderListen},
		&cli.StringFlag{Name: "tls-secret-name", Usage: "Secret in this pod's namespace holding the listener's CA and serving certificate", EnvVars: envVar("tls-secret-name"), Value: cfg.TLS.SecretName, Destination: &cfg.TLS.SecretName},
		&cli.StringFlag{Name: "webhook-config-name", Usage: "MutatingWebhookConfiguration whose caBundle the leader keeps", EnvVars: envVar("webhook-config-name"), Value: cfg.TLS.WebhookConfigName, Destination: &cfg.TLS.WebhookConfigName},
		&cli.StringFlag{Name: "scheduler-deployment", Usage: "kube-scheduler Deployment in this pod's namespace that a CA rotation restarts at each step (empty: a kube-scheduler you restart yourself)", EnvVars: envVar("scheduler-deployment"), Value: cfg.TLS.SchedulerDeployment, Destination: &cfg.TLS.SchedulerDeployment},
		&cli.StringFlag{Name: "service-name", Usage: "Service in front of the leader; the serving certificate covers its DNS names", EnvVars: envVar("service-name"), Value: cfg.TLS.ServiceName, Destination: &cfg.TLS.ServiceName},
		&cli.DurationFlag{Name: "tls-cert-validity", Usage: "lifetime of the serving certificate (the CA lives 10 times longer)", EnvVars: envVar("tls-cert-validity"), Value: cfg.TLS.CertValidity, Destination: &cfg.TLS.CertValidity},
		&cli.DurationFlag{Name: "tls-cert-renew-before", Usage: "renew the serving certificate this long before it expires", EnvVars: envVar("tls-cert-renew-before"), Value: cfg.TLS.CertRenewBefore, Destination: &cfg.TLS.CertRenewBefore},
		&cli.StringFlag{Name: "node-policy", Usage: "default node policy: " + fit.Binpack + " or " + fit.Spread, EnvVars: envVar("node-policy"), Value: cfg.NodePolicy, Destination: &cfg.NodePolicy},
		&cli.StringFlag{Name: "gpu-policy", Usage: "default GPU policy: " + fit.Spread + " or " + fit.Binpack, EnvVars: envVar("gpu-policy"), Value: cfg.GPUPolicy, Destination: &cfg.GPUPolicy},
		&cli.IntFlag{Name: "default-gpumem-percentage", Usage: "GPU memory share given to a container that asks for neither gpumem nor gpumem-percentage (1.." + strconv.Itoa(protocol.MaxPercent) + ")", EnvVars: envVar("default-gpumem-percentage"), Value: cfg.DefaultGPUMemPercentage, Destination: &cfg.DefaultGPUMemPercentage},
		&cli.DurationFlag{Name: "bind-unanswered-hold", Usage: "how long a Binding that got no answer may still land; its pod's room stays held until then (above kube-apiserver's --request-timeout)", EnvVars: envVar("bind-unanswered-hold"), Value: cfg.BindUnansweredHold, Destination: &cfg.BindUnansweredHold},
		&cli.DurationFlag{Name: "bind-wait", Usage: "how long a bind waits for the node's previous pod to be allocated by kubelet (at most " + cluster.MaxBindWait.String() + ")", EnvVars: envVar("bind-wait"), Value: cfg.BindWait, Destination: &cfg.BindWait},
	}
}
