package cluster

import (
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/internal/configapi"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// The cluster role's flags; Validate names a bad value by these.
const (
	flagLeaseName               = "lease-name"
	flagLeaseNamespace          = "lease-namespace"
	flagLeaseDuration           = "lease-duration"
	flagLeaseRenewDeadline      = "lease-renew-deadline"
	flagLeaseRetryPeriod        = "lease-retry-period"
	flagListen                  = "listen"
	flagExtenderListen          = "extender-listen"
	flagTLSSecretName           = "tls-secret-name"
	flagWebhookConfigName       = "webhook-config-name"
	flagSchedulerDeployment     = "scheduler-deployment"
	flagServiceName             = "service-name"
	flagTLSCertValidity         = "tls-cert-validity"
	flagTLSCertRenewBefore      = "tls-cert-renew-before"
	flagSettingsFile            = "cluster-settings-file"
	flagNodePolicy              = "node-policy"
	flagGPUPolicy               = "gpu-policy"
	flagDefaultGPUMemPercentage = "default-gpumem-percentage"
	flagDefaultGPUCores         = "default-gpucores"
	flagBindUnansweredHold      = "bind-unanswered-hold"
	flagBindWait                = "bind-wait"
	flagLeaderNodesFile         = "leader-nodes-file"
)

// Flags are the cluster role's settings, bound to c.
func (c *Config) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: flagLeaseName, Usage: "Lease that elects the leader", Value: c.LeaseName, Destination: &c.LeaseName},
		&cli.StringFlag{Name: flagLeaseNamespace, Usage: "namespace of the Lease; empty means this pod's namespace", Value: c.LeaseNamespace, Destination: &c.LeaseNamespace},
		&cli.DurationFlag{Name: flagLeaseDuration, Usage: "how long followers wait before taking a silent leader's lease", Value: c.LeaseDuration, Destination: &c.LeaseDuration},
		&cli.DurationFlag{Name: flagLeaseRenewDeadline, Usage: "how long the leader retries renewing before it steps down", Value: c.LeaseRenewDeadline, Destination: &c.LeaseRenewDeadline},
		&cli.DurationFlag{Name: flagLeaseRetryPeriod, Usage: "wait between election attempts", Value: c.LeaseRetryPeriod, Destination: &c.LeaseRetryPeriod},
		&cli.StringFlag{Name: flagLeaderNodesFile, Usage: "file naming, comma-separated, the nodes whose replicas may lead; no file or no name: any node", Value: c.LeaderNodesFile, Destination: &c.LeaderNodesFile},
		&cli.StringFlag{Name: flagListen, Usage: "HTTPS address of the webhook and the /healthz and /readyz probes", Value: c.Listen, Destination: &c.Listen},
		&cli.StringFlag{Name: flagExtenderListen, Usage: "HTTPS address of the scheduler extender; callers must present kube-scheduler's client certificate from the TLS Secret", Value: c.ExtenderListen, Destination: &c.ExtenderListen},
		&cli.StringFlag{Name: flagTLSSecretName, Usage: "Secret in this pod's namespace holding the listener's CA and serving certificate", Value: c.TLS.SecretName, Destination: &c.TLS.SecretName},
		&cli.StringFlag{Name: flagWebhookConfigName, Usage: "MutatingWebhookConfiguration whose caBundle the leader keeps", Value: c.TLS.WebhookConfigName, Destination: &c.TLS.WebhookConfigName},
		&cli.StringFlag{Name: flagSchedulerDeployment, Usage: "kube-scheduler Deployment in this pod's namespace whose pods vgpud deletes, one at a time, when the CA or their client certificate changes (empty: a kube-scheduler you restart yourself)", Value: c.TLS.SchedulerDeployment, Destination: &c.TLS.SchedulerDeployment},
		&cli.StringFlag{Name: flagServiceName, Usage: "Service in front of the leader; the serving certificate covers its DNS names", Value: c.TLS.ServiceName, Destination: &c.TLS.ServiceName},
		&cli.DurationFlag{Name: flagTLSCertValidity, Usage: "lifetime of the serving certificate (the CA lives 10 times longer)", Value: c.TLS.CertValidity, Destination: &c.TLS.CertValidity},
		&cli.DurationFlag{Name: flagTLSCertRenewBefore, Usage: "renew the serving certificate this long before it expires", Value: c.TLS.CertRenewBefore, Destination: &c.TLS.CertRenewBefore},
		&cli.StringFlag{Name: flagSettingsFile, Usage: "YAML file of " + configapi.Keys(c.fileSettings()) + " (version: " + configapi.Version + ") that the leader reads each term and whenever it changes, winning over the flags; a value that does not validate is refused and logged, and what is in force stays. Usually the vgpud ConfigMap's cluster-settings.yaml; empty or absent: the flags alone", Value: c.SettingsFile, Destination: &c.SettingsFile},
		&cli.StringFlag{Name: flagNodePolicy, Usage: "default node policy: " + podmodel.Binpack + " or " + podmodel.Spread, Value: c.NodePolicy, Destination: &c.NodePolicy},
		&cli.StringFlag{Name: flagGPUPolicy, Usage: "default GPU policy: " + podmodel.Spread + " or " + podmodel.Binpack + ", optionally chained with " + podmodel.NUMA + " and " + podmodel.Topology + " in HAMi's syntax (" + podmodel.Binpack + "," + podmodel.Topology + ")", Value: c.GPUPolicy, Destination: &c.GPUPolicy},
		&cli.IntFlag{Name: flagDefaultGPUMemPercentage, Usage: "GPU memory share given to a container that asks for neither gpumem nor gpumem-percentage (1.." + strconv.Itoa(protocol.MaxPercent) + ")", Value: c.DefaultGPUMemPercentage, Destination: &c.DefaultGPUMemPercentage},
		&cli.IntFlag{Name: flagDefaultGPUCores, Usage: "share of each GPU's cores, in percent, given to and charged for a container that names no gpucores (1.." + strconv.Itoa(fit.MaxDefaultCores) + "); 0: a slot's share, the GPU's cores divided by its split, at most " + strconv.Itoa(fit.MaxDefaultCores), Value: c.DefaultGPUCores, Destination: &c.DefaultGPUCores},
		&cli.DurationFlag{Name: flagBindUnansweredHold, Usage: "how long a Binding that got no answer may still land; its pod's room stays held until then (above kube-apiserver's --request-timeout)", Value: c.BindUnansweredHold, Destination: &c.BindUnansweredHold},
		&cli.DurationFlag{Name: flagBindWait, Usage: "how long a bind waits for the node's previous pod to be allocated by kubelet (at most " + MaxBindWait.String() + ")", Value: c.BindWait, Destination: &c.BindWait},
	}
}
