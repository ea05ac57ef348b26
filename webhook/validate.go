package webhook

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/setting"
)

// Validate reports every webhook setting that cannot work, naming its flag.
func (c Config) Validate() error {
	var errs []error
	add := func(flag string, value any, allowed string) {
		errs = append(errs, setting.Invalid(flag, value, allowed))
	}
	if c.DefaultGPUCount < 1 || c.DefaultGPUCount > protocol.MaxGPUsPerContainer {
		add("webhook-default-gpu-count", c.DefaultGPUCount, fmt.Sprintf("want 1..%d", protocol.MaxGPUsPerContainer))
	}
	if c.CorePolicy != "" && !slices.Contains(CorePolicies(), c.CorePolicy) {
		add("webhook-core-policy", c.CorePolicy, "want "+strings.Join(CorePolicies(), ", ")+" or empty")
	}
	if c.RuntimeClass != "" && len(validation.IsDNS1123Subdomain(c.RuntimeClass)) > 0 {
		add("webhook-runtime-class", c.RuntimeClass, "want a RuntimeClass name such as nvidia")
	}
	return errors.Join(errs...)
}
