package main

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/webhook"
)

// webhookFlags are the admission webhook's settings. Its scheduler name is
// the cluster role's --scheduler-name, copied in when wiring.
func webhookFlags(cfg *webhook.Config) []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "webhook-default-gpu-count", Usage: "nvidia.com/gpu added to a container that gives only GPU memory or cores", EnvVars: envVar("webhook-default-gpu-count"), Value: cfg.DefaultGPUCount, Destination: &cfg.DefaultGPUCount},
		&cli.BoolFlag{Name: "webhook-override-default-scheduler", Usage: "also take GPU pods whose schedulerName is default-scheduler (the apiserver's default)", EnvVars: envVar("webhook-override-default-scheduler"), Value: cfg.OverrideDefaultScheduler, Destination: &cfg.OverrideDefaultScheduler},
		&cli.StringFlag{Name: "webhook-runtime-class", Usage: "runtimeClassName set on GPU pods that have none; empty sets nothing", EnvVars: envVar("webhook-runtime-class"), Value: cfg.RuntimeClassName, Destination: &cfg.RuntimeClassName},
		&cli.StringFlag{Name: "webhook-core-policy", Usage: "core-limit policy injected as " + webhook.EnvCorePolicy + ": " + strings.Join(webhook.CorePolicies(), ", ") + "; empty injects nothing", EnvVars: envVar("webhook-core-policy"), Value: cfg.CorePolicy, Destination: &cfg.CorePolicy},
		&cli.BoolFlag{Name: "webhook-visible-devices-none", Usage: "set " + webhook.EnvVisibleDevices + "=none in the containers of a GPU pod that ask for no GPU", EnvVars: envVar("webhook-visible-devices-none"), Value: cfg.VisibleDevicesNone, Destination: &cfg.VisibleDevicesNone},
		&cli.StringFlag{Name: "webhook-secret-name", Usage: "Secret in this pod's namespace holding the webhook CA and serving certificate", EnvVars: envVar("webhook-secret-name"), Value: cfg.SecretName, Destination: &cfg.SecretName},
		&cli.StringFlag{Name: "webhook-config-name", Usage: "MutatingWebhookConfiguration whose caBundle the leader keeps", EnvVars: envVar("webhook-config-name"), Value: cfg.WebhookConfigName, Destination: &cfg.WebhookConfigName},
		&cli.StringFlag{Name: "webhook-service-name", Usage: "Service in front of the leader; the serving certificate covers its DNS names", EnvVars: envVar("webhook-service-name"), Value: cfg.ServiceName, Destination: &cfg.ServiceName},
		&cli.DurationFlag{Name: "webhook-cert-validity", Usage: "lifetime of the serving certificate (the CA lives 10 times longer)", EnvVars: envVar("webhook-cert-validity"), Value: cfg.CertValidity, Destination: &cfg.CertValidity},
		&cli.DurationFlag{Name: "webhook-cert-renew-before", Usage: "renew the serving certificate this long before it expires", EnvVars: envVar("webhook-cert-renew-before"), Value: cfg.RenewBefore, Destination: &cfg.RenewBefore},
	}
}

func validateWebhook(c webhook.Config) error {
	var errs []error
	add := func(flag string, value any, allowed string) { errs = append(errs, flagError(flag, value, allowed)) }
	if c.DefaultGPUCount < 1 || c.DefaultGPUCount > protocol.MaxGPUsPerContainer {
		add("webhook-default-gpu-count", c.DefaultGPUCount, "want 1..64")
	}
	if c.CorePolicy != "" && !slices.Contains(webhook.CorePolicies(), c.CorePolicy) {
		add("webhook-core-policy", c.CorePolicy, "want "+strings.Join(webhook.CorePolicies(), ", ")+" or empty")
	}
	if c.RuntimeClassName != "" && len(validation.IsDNS1123Subdomain(c.RuntimeClassName)) > 0 {
		add("webhook-runtime-class", c.RuntimeClassName, "want a RuntimeClass name such as nvidia")
	}
	for _, n := range []struct{ flag, value string }{{"webhook-secret-name", c.SecretName}, {"webhook-config-name", c.WebhookConfigName}} {
		if len(validation.IsDNS1123Subdomain(n.value)) > 0 {
			add(n.flag, quoteEmpty(n.value), "want an object name: lower-case letters, digits, '-' and '.'")
		}
	}
	if len(validation.IsDNS1035Label(c.ServiceName)) > 0 {
		add("webhook-service-name", quoteEmpty(c.ServiceName), "want a Service name: lower-case letters, digits and '-', starting with a letter")
	}
	if c.CertValidity < time.Hour {
		add("webhook-cert-validity", c.CertValidity, "want at least 1h")
	}
	if c.RenewBefore <= 0 || c.RenewBefore >= c.CertValidity {
		add("webhook-cert-renew-before", c.RenewBefore, "must be positive and shorter than --webhook-cert-validity ("+c.CertValidity.String()+")")
	}
	return errors.Join(errs...)
}

func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}
