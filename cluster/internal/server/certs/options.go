package certs

import (
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The flags of Config.
const (
	FlagTLSSecretName       = "tls-secret-name"
	FlagWebhookConfigName   = "webhook-config-name"
	FlagSchedulerDeployment = "scheduler-deployment"
	FlagServiceName         = "service-name"
	FlagTLSCertValidity     = "tls-cert-validity"
	FlagTLSCertRenewBefore  = "tls-cert-renew-before"
)

// Flags are c's flags, bound to it.
func (c *Config) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagTLSSecretName, Usage: "Secret in this pod's namespace holding the listener's CA and serving certificate", Value: c.SecretName, Destination: &c.SecretName},
		&cli.StringFlag{Name: FlagWebhookConfigName, Usage: "MutatingWebhookConfiguration whose caBundle the leader keeps", Value: c.WebhookConfigName, Destination: &c.WebhookConfigName},
		&cli.StringFlag{Name: FlagSchedulerDeployment, Usage: "kube-scheduler Deployment in this pod's namespace whose pods vgpud deletes, one at a time, when the CA or their client certificate changes (empty: a kube-scheduler you restart yourself)", Value: c.SchedulerDeployment, Destination: &c.SchedulerDeployment},
		&cli.StringFlag{Name: FlagServiceName, Usage: "Service in front of the leader; the serving certificate covers its DNS names", Value: c.ServiceName, Destination: &c.ServiceName},
		&cli.DurationFlag{Name: FlagTLSCertValidity, Usage: "lifetime of the serving certificate (the CA lives 10 times longer)", Value: c.CertValidity, Destination: &c.CertValidity},
		&cli.DurationFlag{Name: FlagTLSCertRenewBefore, Usage: "renew the serving certificate this long before it expires", Value: c.CertRenewBefore, Destination: &c.CertRenewBefore},
	}
}

// Validate reports what in c cannot work, by its flag.
func (c Config) Validate() field.ErrorList {
	var errs field.ErrorList
	add := func(flag string, v any, want string) {
		errs = append(errs, field.Invalid(field.NewPath(flag), v, want))
	}
	for _, n := range []struct{ flag, value string }{{FlagTLSSecretName, c.SecretName}, {FlagWebhookConfigName, c.WebhookConfigName}} {
		if len(validation.IsDNS1123Subdomain(n.value)) > 0 {
			add(n.flag, n.value, "want an object name: lower-case letters, digits, '-' and '.'")
		}
	}
	if len(validation.IsDNS1035Label(c.ServiceName)) > 0 {
		add(FlagServiceName, c.ServiceName, "want a Service name: lower-case letters, digits and '-', starting with a letter")
	}
	if c.CertValidity < time.Hour {
		add(FlagTLSCertValidity, c.CertValidity, "want at least 1h")
	}
	if c.CertRenewBefore <= 0 || c.CertRenewBefore >= c.CertValidity {
		add(FlagTLSCertRenewBefore, c.CertRenewBefore, "must be positive and shorter than --"+FlagTLSCertValidity+" ("+c.CertValidity.String()+")")
	}
	return errs
}
