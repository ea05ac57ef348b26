package cluster

import (
	"io"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/cluster/internal/clusterview"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// ViewFlags are the cluster view's flags: `kubectl vgpud` and `vgpud
// inspect --cluster` share them.
func ViewFlags(scheduler string) []cli.Flag { return clusterview.Flags(scheduler) }

// Inspect prints the cluster as vgpud books it, read from the API as c's
// ViewFlags say.
func Inspect(c *cli.Context, names wellknown.ResourceNames, version string, stdout io.Writer) error {
	return clusterview.Show(c.Context, clusterview.OptionsFrom(c, version), names, stdout)
}

// KubectlPlugin is vgpud as `kubectl vgpud`: the cluster view alone.
func KubectlPlugin(stdout, stderr io.Writer, scheduler string, names wellknown.ResourceNames, version string) *cli.App {
	return clusterview.PluginApp(stdout, stderr, scheduler, names, version)
}

// ClusterViewFlag is `vgpud inspect --cluster`, which shows the cluster
// view instead of this node's.
func ClusterViewFlag() cli.Flag { return clusterview.ClusterFlag() }

// NoViewFlags refuses the view's flags in `vgpud inspect` without
// --cluster: the node's own view has no namespace or node to narrow.
func NoViewFlags(c *cli.Context) error { return clusterview.NoViewFlags(c) }
