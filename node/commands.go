package node

import (
	"io"

	"github.com/vgpud/vgpud/node/internal/nodesetup"
	"github.com/vgpud/vgpud/node/internal/runtimecheck"
)

// RunPreflight is `vgpud preflight`: the runtime check the node role runs
// every minute, once, under cfg's runtime settings.
func RunPreflight(cfg Config, asJSON bool, stdout io.Writer) error {
	return runtimecheck.Command(cfg.Runtime, cfg.Identity.NRISocket, asJSON, stdout)
}

// RunNodeSetup is `vgpud node-setup install|remove` for the runtime cfg
// names.
func RunNodeSetup(cfg Config, action string, stdout io.Writer) error {
	return nodesetup.Run(cfg.Runtime, cfg.Identity.NRISocket, action, stdout)
}
