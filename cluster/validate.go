package cluster

import (
	"errors"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vgpud/vgpud/cluster/fit"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/setting"
)

// Validate reports every cluster-role setting that cannot work, naming its
// flag.
func (c Config) Validate() error {
	var errs []error
	add := func(flag string, value any, allowed string) {
		errs = append(errs, setting.Invalid(flag, value, allowed))
	}
	if c.LeaseName == "" {
		add("lease-name", "", "want a Lease name such as vgpud-leader")
	}
	if c.LeaseDuration < time.Second || c.LeaseDuration%time.Second != 0 {
		// The Lease object stores its duration in whole seconds; 0 would
		// make every follower see the lease as expired at once.
		add("lease-duration", c.LeaseDuration, "want whole seconds, at least 1s")
	}
	if c.LeaseDuration <= c.LeaseRenewDeadline {
		add("lease-duration", c.LeaseDuration, "must be longer than --lease-renew-deadline ("+c.LeaseRenewDeadline.String()+")")
	}
	if c.LeaseRetryPeriod <= 0 || c.LeaseRenewDeadline <= c.LeaseRetryPeriod {
		add("lease-renew-deadline", c.LeaseRenewDeadline, "must be longer than --lease-retry-period ("+c.LeaseRetryPeriod.String()+"), which must be positive")
	}
	if c.Listen == "" {
		add("listen", "", "want an address such as :9443")
	}
	if c.ExtenderListen == "" || c.ExtenderListen == c.Listen {
		add("extender-listen", (c.ExtenderListen), "want an address other than --listen's, such as :9444")
	}
	for _, n := range []struct{ flag, value string }{{"tls-secret-name", c.TLS.SecretName}, {"webhook-config-name", c.TLS.WebhookConfigName}} {
		if len(validation.IsDNS1123Subdomain(n.value)) > 0 {
			add(n.flag, (n.value), "want an object name: lower-case letters, digits, '-' and '.'")
		}
	}
	if len(validation.IsDNS1035Label(c.TLS.ServiceName)) > 0 {
		add("service-name", (c.TLS.ServiceName), "want a Service name: lower-case letters, digits and '-', starting with a letter")
	}
	if c.TLS.CertValidity < time.Hour {
		add("tls-cert-validity", c.TLS.CertValidity, "want at least 1h")
	}
	if c.TLS.CertRenewBefore <= 0 || c.TLS.CertRenewBefore >= c.TLS.CertValidity {
		add("tls-cert-renew-before", c.TLS.CertRenewBefore, "must be positive and shorter than --tls-cert-validity ("+c.TLS.CertValidity.String()+")")
	}
	if c.NodePolicy != fit.Binpack && c.NodePolicy != fit.Spread {
		add("node-policy", c.NodePolicy, "want "+fit.Binpack+" or "+fit.Spread)
	}
	if c.GPUPolicy != fit.Binpack && c.GPUPolicy != fit.Spread {
		add("gpu-policy", c.GPUPolicy, "want "+fit.Spread+" or "+fit.Binpack)
	}
	if c.BindWait <= 0 || c.BindWait > MaxBindWait {
		add("bind-wait", c.BindWait, "want a duration above 0 and at most "+MaxBindWait.String()+", e.g. 10s")
	}
	if c.BindUnansweredHold < time.Second {
		add("bind-unanswered-hold", c.BindUnansweredHold, "want at least 1s; above kube-apiserver's --request-timeout, 1m by default")
	}
	if c.DefaultGPUMemPercentage < 1 || c.DefaultGPUMemPercentage > protocol.MaxPercent {
		add("default-gpumem-percentage", c.DefaultGPUMemPercentage, "want 1.."+strconv.Itoa(protocol.MaxPercent))
	}
	return errors.Join(errs...)
}
