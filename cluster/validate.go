package cluster

import (
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// Validate reports every cluster-role setting that cannot work, by its
// flag.
func (c Config) Validate() field.ErrorList {
	var errs field.ErrorList
	add := func(flag string, value any, allowed string) {
		errs = append(errs, field.Invalid(field.NewPath(flag), value, allowed))
	}
	if c.LeaseName == "" {
		add(flagLeaseName, "", "want a Lease name such as vgpud-leader")
	}
	if c.LeaseDuration < time.Second || c.LeaseDuration%time.Second != 0 {
		// The Lease object stores its duration in whole seconds; 0 would
		// make every follower see the lease as expired at once.
		add(flagLeaseDuration, c.LeaseDuration, "want whole seconds, at least 1s")
	}
	if c.LeaseDuration > MaxLeaseDuration {
		add(flagLeaseDuration, c.LeaseDuration, "want at most "+MaxLeaseDuration.String()+": the vgpud-lease admission policy refuses a longer hold")
	}
	if c.LeaseDuration <= c.LeaseRenewDeadline {
		add(flagLeaseDuration, c.LeaseDuration, "must be longer than --"+flagLeaseRenewDeadline+" ("+c.LeaseRenewDeadline.String()+")")
	}
	if c.LeaseRetryPeriod <= 0 || c.LeaseRenewDeadline <= c.LeaseRetryPeriod {
		add(flagLeaseRenewDeadline, c.LeaseRenewDeadline, "must be longer than --"+flagLeaseRetryPeriod+" ("+c.LeaseRetryPeriod.String()+"), which must be positive")
	}
	if c.Listen == "" {
		add(flagListen, "", "want an address such as :9443")
	}
	if c.ExtenderListen == "" || c.ExtenderListen == c.Listen {
		add(flagExtenderListen, (c.ExtenderListen), "want an address other than --"+flagListen+"'s, such as :9444")
	}
	for _, n := range []struct{ flag, value string }{{flagTLSSecretName, c.TLS.SecretName}, {flagWebhookConfigName, c.TLS.WebhookConfigName}} {
		if len(validation.IsDNS1123Subdomain(n.value)) > 0 {
			add(n.flag, (n.value), "want an object name: lower-case letters, digits, '-' and '.'")
		}
	}
	if len(validation.IsDNS1035Label(c.TLS.ServiceName)) > 0 {
		add(flagServiceName, (c.TLS.ServiceName), "want a Service name: lower-case letters, digits and '-', starting with a letter")
	}
	if c.TLS.CertValidity < time.Hour {
		add(flagTLSCertValidity, c.TLS.CertValidity, "want at least 1h")
	}
	if c.TLS.CertRenewBefore <= 0 || c.TLS.CertRenewBefore >= c.TLS.CertValidity {
		add(flagTLSCertRenewBefore, c.TLS.CertRenewBefore, "must be positive and shorter than --"+flagTLSCertValidity+" ("+c.TLS.CertValidity.String()+")")
	}
	if c.SettingsFile != "" && !filepath.IsAbs(c.SettingsFile) {
		add(flagSettingsFile, c.SettingsFile, "want an absolute path such as /etc/vgpud/cluster-settings.yaml, or empty")
	}
	if c.NodePolicy != podmodel.Binpack && c.NodePolicy != podmodel.Spread {
		add(flagNodePolicy, c.NodePolicy, "want "+podmodel.Binpack+" or "+podmodel.Spread)
	}
	if p, err := podmodel.ParseGPUPolicy(c.GPUPolicy); err != nil {
		add(flagGPUPolicy, c.GPUPolicy, err.Error())
	} else if p.Mutex {
		add(flagGPUPolicy, c.GPUPolicy, podmodel.Mutex+" as the default would hold every GPU alone, which is no sharing at all: name it in the pods that need it")
	} else if p.Load == "" {
		add(flagGPUPolicy, c.GPUPolicy, "name "+podmodel.Spread+" or "+podmodel.Binpack+", optionally chained with "+podmodel.NUMA+" (e.g. "+podmodel.Binpack+","+podmodel.NUMA+")")
	}
	if c.BindWait <= 0 || c.BindWait > MaxBindWait {
		add(flagBindWait, c.BindWait, "want a duration above 0 and at most "+MaxBindWait.String()+", e.g. 10s")
	}
	if c.BindUnansweredHold < time.Second {
		add(flagBindUnansweredHold, c.BindUnansweredHold, "want at least 1s; above kube-apiserver's --request-timeout, 1m by default")
	}
	if c.DefaultGPUMemPercentage < 1 || c.DefaultGPUMemPercentage > protocol.MaxPercent {
		add(flagDefaultGPUMemPercentage, c.DefaultGPUMemPercentage, "want 1.."+strconv.Itoa(protocol.MaxPercent))
	}
	if c.DefaultGPUCores < 0 || c.DefaultGPUCores > fit.MaxDefaultCores {
		add(flagDefaultGPUCores, c.DefaultGPUCores, "want 0 (a slot's share) or 1.."+strconv.Itoa(fit.MaxDefaultCores)+"; a container holds a GPU whole only by asking gpucores 100")
	}
	return errs
}
