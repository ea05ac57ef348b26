package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/webhook"
)

// webhookFlags are the admission webhook's own settings; the scheduler
// and resource names it shares are common flags.
func webhookFlags(cfg *webhook.Config) []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "webhook-default-gpu-count", Usage: fmt.Sprintf("nvidia.com/gpu added to a container that gives only GPU memory or cores (1..%d)", protocol.MaxGPUsPerContainer), EnvVars: envVar("webhook-default-gpu-count"), Value: cfg.DefaultGPUCount, Destination: &cfg.DefaultGPUCount},
		&cli.BoolFlag{Name: "webhook-override-default-scheduler", Usage: "also take GPU pods whose schedulerName is default-scheduler (the apiserver's default)", EnvVars: envVar("webhook-override-default-scheduler"), Value: cfg.OverrideDefaultScheduler, Destination: &cfg.OverrideDefaultScheduler},
		&cli.StringFlag{Name: "webhook-runtime-class", Usage: "runtimeClassName set on GPU pods that have none; empty sets nothing", EnvVars: envVar("webhook-runtime-class"), Value: cfg.RuntimeClass, Destination: &cfg.RuntimeClass},
		&cli.StringFlag{Name: "webhook-core-policy", Usage: "core-limit policy injected as " + webhook.EnvCorePolicy + ": " + strings.Join(webhook.CorePolicies(), ", ") + "; empty injects nothing", EnvVars: envVar("webhook-core-policy"), Value: cfg.CorePolicy, Destination: &cfg.CorePolicy},
		&cli.BoolFlag{Name: "webhook-visible-devices-none", Usage: "set " + webhook.EnvVisibleDevices + "=none in the containers of a GPU pod that ask for no GPU", EnvVars: envVar("webhook-visible-devices-none"), Value: cfg.VisibleDevicesNone, Destination: &cfg.VisibleDevicesNone},
	}
}
