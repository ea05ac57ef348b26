package webhook

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// The webhook's flags; Validate names a bad value by these.
const (
	flagRuntimeClass       = "webhook-runtime-class"
	flagCorePolicy         = "webhook-core-policy"
	flagVisibleDevicesNone = "webhook-visible-devices-none"
	flagHookOptional       = "webhook-hook-optional-namespaces"
	flagClaimDeviceClass   = "webhook-claim-device-class"
)

// Flags are the webhook's own settings, bound to c; the scheduler and
// resource names it shares with other parts are the binary's.
func (c *Config) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: flagRuntimeClass, Usage: "runtimeClassName set on GPU pods that have none; empty sets nothing", Value: c.RuntimeClass, Destination: &c.RuntimeClass},
		&cli.StringFlag{Name: flagCorePolicy, Usage: "core-limit policy injected as " + EnvCorePolicy + ": " + strings.Join(CorePolicies(), ", ") + "; empty injects nothing", Value: c.CorePolicy, Destination: &c.CorePolicy},
		&cli.BoolFlag{Name: flagVisibleDevicesNone, Usage: "set " + EnvVisibleDevices + "=none in the containers of a GPU pod that ask for no GPU", Value: c.VisibleDevicesNone, Destination: &c.VisibleDevicesNone},
		&cli.StringFlag{Name: flagClaimDeviceClass, Usage: "DeviceClass of the claims vGPU pods become where their namespace is labelled " + wellknown.LabelGPUClaims + "=true", Value: c.ClaimDeviceClass, Destination: &c.ClaimDeviceClass},
		&cli.StringSliceFlag{Name: flagHookOptional, Usage: "namespaces whose pods start without vgpud's runtime hook: the webhook never marks them " + wellknown.AnnotationRequiredPlugins + " (vgpud's own, the pod network's; as the vgpud-runtime-hook-required policy lists them)", Value: cli.NewStringSlice(c.HookOptionalNamespaces...),
			Action: func(_ *cli.Context, v []string) error {
				c.HookOptionalNamespaces = slices.DeleteFunc(v, func(s string) bool { return s == "" })
				return nil
			}},
	}
}
