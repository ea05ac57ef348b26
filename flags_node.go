package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/node"
)

func nodeFlags(cfg *node.Config) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "gpu-backend", Usage: "where GPUs come from: " + node.BackendChoices(), EnvVars: envVar("gpu-backend"), Value: cfg.Backend, Destination: &cfg.Backend},
		&cli.StringFlag{Name: "device-plugin-dir", Usage: "kubelet's device-plugin directory", EnvVars: envVar("device-plugin-dir"), Value: cfg.PluginDir, Destination: &cfg.PluginDir},
		&cli.IntFlag{Name: "split", Usage: "virtual devices advertised per GPU (how many containers may share one)", EnvVars: envVar("split"), Value: cfg.Split, Destination: &cfg.Split},
		&cli.Float64Flag{Name: "memory-scaling", Usage: "factor on each GPU's memory; above 1 oversubscribes", EnvVars: envVar("memory-scaling"), Value: cfg.MemoryScaling, Destination: &cfg.MemoryScaling},
		&cli.Float64Flag{Name: "core-scaling", Usage: "factor on each GPU's cores", EnvVars: envVar("core-scaling"), Value: cfg.CoreScaling, Destination: &cfg.CoreScaling},
		&cli.StringFlag{Name: "inspect-socket", Usage: "unix socket that `vgpud inspect` reads", EnvVars: envVar("inspect-socket"), Value: cfg.InspectSocket, Destination: &cfg.InspectSocket},
	}
}

func validateNode(c node.Config) error {
	var errs []error
	if err := node.ValidateBackend(c.Backend); err != nil {
		errs = append(errs, flagError("gpu-backend", c.Backend, err.Error()+"; want "+node.BackendChoices()))
	}
	if c.Split < 1 || c.Split > 1000 {
		errs = append(errs, flagError("split", c.Split, "want 1..1000"))
	}
	if c.MemoryScaling <= 0 || c.MemoryScaling > 100 {
		errs = append(errs, flagError("memory-scaling", c.MemoryScaling, "want a factor above 0 and at most 100 (1 = no oversubscription)"))
	}
	if c.CoreScaling <= 0 || c.CoreScaling > 100 {
		errs = append(errs, flagError("core-scaling", c.CoreScaling, "want a factor above 0 and at most 100"))
	}
	if c.PluginDir == "" {
		errs = append(errs, flagError("device-plugin-dir", `""`, "want kubelet's device-plugin directory, usually /var/lib/kubelet/device-plugins"))
	}
	if c.InspectSocket == "" {
		errs = append(errs, flagError("inspect-socket", `""`, fmt.Sprintf("want a socket path such as %s", node.DefaultConfig().InspectSocket)))
	}
	return errors.Join(errs...)
}
