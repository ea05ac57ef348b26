package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/internal/kubeclient"
	"github.com/vgpud/vgpud/node/internal/inspect"
	"github.com/vgpud/vgpud/node/internal/nodesetup"
	"github.com/vgpud/vgpud/node/internal/preflight"
	"github.com/vgpud/vgpud/node/internal/runtimecheck"
)

// RunPreflight is `vgpud preflight`: the runtime check the node role runs
// every minute, once, under cfg's runtime settings.
func RunPreflight(cl *cli.Context, cfg Config, stdout io.Writer) error {
	return runtimecheck.Command(cfg.Runtime, cfg.Identity.NRISocket, cl.String(runtimecheck.FlagRuntimeVersion), cl.Bool("json"), stdout)
}

// NodeSetup is `vgpud node-setup`: the runtime's settings, shared with
// the role, and its own.
type NodeSetup struct {
	cfg  Config
	opts nodesetup.Options
}

// NewNodeSetup is `vgpud node-setup` with its defaults.
func NewNodeSetup() *NodeSetup {
	return &NodeSetup{cfg: DefaultConfig(), opts: nodesetup.DefaultOptions()}
}

// SharedFlags are the settings node-setup shares with the role, which
// read the role's environment too.
func (n *NodeSetup) SharedFlags() []cli.Flag {
	return []cli.Flag{n.cfg.Runtime.RuntimeConfigFlag(), n.cfg.Identity.NRISocketFlag()}
}

// OwnFlags are node-setup's own flags.
func (n *NodeSetup) OwnFlags() []cli.Flag { return n.opts.Flags() }

// Run is `vgpud node-setup ACTION`: install or remove by hand on the
// host, or, with --node, as the chart's init containers run it; hold
// (block until stopped: the revert DaemonSet's main container) and
// wait-reverted (the chart's pre-delete hook). kube is called only by
// what calls the API.
func (n *NodeSetup) Run(ctx context.Context, action string, kube func() (kubeclient.Clients, error), stdout io.Writer) error {
	if errs := n.opts.Validate(); len(errs) > 0 {
		return cli.Exit(errs.ToAggregate().Error(), 2)
	}
	switch action {
	case "hold":
		<-ctx.Done()
		return nil
	case "wait-reverted":
		k, err := kube()
		if err != nil {
			return err
		}
		err = nodesetup.WaitReverted(ctx, k.Core, n.opts.WaitTimeout, 2*time.Second, stdout)
		if errors.Is(err, nodesetup.ErrInterrupted) {
			// 128+SIGTERM, as a killed process: the Job replaces its pod
			// (exit 1 and 2 fail it, manifests/node-revert.yaml), and
			// never context.Canceled, which would exit 0 as done.
			return cli.Exit(err.Error(), 143)
		}
		return err
	case "install", "remove":
	default:
		return cli.Exit(fmt.Sprintf("node-setup %q: want install, remove, hold or wait-reverted", action), 2)
	}
	if n.opts.Node == "" {
		return nodesetup.Run(n.cfg.Runtime, n.cfg.Identity.NRISocket, action, stdout)
	}
	spec, err := preflight.ParseSpec(n.cfg.Runtime.RuntimeConfig)
	if err != nil || spec.Runtime == "" {
		return cli.Exit(fmt.Sprintf("--%s %q: name the runtime's configuration, e.g. containerd:/etc/containerd/config.toml", runtimecheck.FlagRuntimeConfig, n.cfg.Runtime.RuntimeConfig), 2)
	}
	k, err := kube()
	if err != nil {
		return err
	}
	s := nodesetup.InCluster{
		Spec: spec, NRISocket: n.cfg.Identity.NRISocket, RuntimeSocket: n.opts.RuntimeSocket,
		Restart: n.opts.Restart, RestartTimeout: n.opts.RestartTimeout,
		Node: n.opts.Node, Nodes: k.Core, Events: k.Events, Leases: k.Coordination, Namespace: n.opts.Namespace, Lease: n.opts.Lease, Holder: n.opts.Holder, LeaseWait: n.opts.LeaseWait,
		Out: stdout,
	}
	if action == "install" {
		return s.Install(ctx)
	}
	return s.Revert(ctx)
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
