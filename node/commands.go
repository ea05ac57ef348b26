package node

import (
	"io"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/node/internal/inspect"
	"github.com/vgpud/vgpud/node/internal/nodesetup"
	"github.com/vgpud/vgpud/node/internal/runtimecheck"
)

// RunPreflight is `vgpud preflight`: the runtime check the node role runs
// every minute, once, under cfg's runtime settings.
func RunPreflight(cl *cli.Context, cfg Config, stdout io.Writer) error {
	return runtimecheck.Command(cfg.Runtime, cfg.Identity.NRISocket, cl.String(runtimecheck.FlagRuntimeVersion), cl.Bool("json"), stdout)
}

// RunNodeSetup is `vgpud node-setup install|remove` for the runtime cfg
// names.
func RunNodeSetup(cfg Config, action string, stdout io.Writer) error {
	return nodesetup.Run(cfg.Runtime, cfg.Identity.NRISocket, action, stdout)
}

// InspectFlags are `vgpud inspect`'s flags for this node: the socket, and
// the command's own.
func (c *Config) InspectFlags() []cli.Flag {
	return append([]cli.Flag{c.Inspect.InspectSocketFlag()}, inspect.CommandFlags()...)
}

// Inspect is `vgpud inspect` on this node, as cl's InspectFlags say.
func Inspect(cl *cli.Context, cfg Config, stdout io.Writer) error {
	return inspect.Command(cl, cfg.Inspect.InspectSocket, stdout)
}

// PreflightFlags are `vgpud preflight`'s flags: the runtime's settings,
// and the command's own.
func (c *Config) PreflightFlags() []cli.Flag {
	return append([]cli.Flag{c.Runtime.RuntimeConfigFlag(), c.Identity.NRISocketFlag()}, runtimecheck.CommandFlags()...)
}

// NodeSetupFlags are `vgpud node-setup`'s flags: the runtime's settings.
func (c *Config) NodeSetupFlags() []cli.Flag {
	return []cli.Flag{c.Runtime.RuntimeConfigFlag(), c.Identity.NRISocketFlag()}
}
