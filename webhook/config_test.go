package webhook

import (
	"slices"
	"testing"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if c.DefaultGPUCount != 1 || !c.OverrideDefaultScheduler || c.CorePolicy != "" || c.VisibleDevicesNone || c.RuntimeClassName != "" {
		t.Fatalf("mutation defaults: %+v", c)
	}
	if c.RenewBefore <= 0 || c.RenewBefore >= c.CertValidity {
		t.Fatalf("renew-before %s must lie within validity %s", c.RenewBefore, c.CertValidity)
	}
	cc := c.Certs("vgpud-system")
	if cc.Namespace != "vgpud-system" || cc.SecretName != "vgpud-tls" || cc.WebhookName != "vgpud" || cc.ServiceName != "vgpud" || cc.Validity != c.CertValidity {
		t.Fatalf("Certs = %+v", cc)
	}
	if !slices.Equal(CorePolicies(), []string{"default", "force", "disable"}) {
		t.Fatalf("CorePolicies = %v", CorePolicies())
	}
}
