package nslabels

import (
	"github.com/urfave/cli/v2"
)

// The flags of Options.
const (
	FlagLabel     = "label"
	FlagNamespace = "namespace"
)

// Options are what `vgpud namespace-labels` sets, and where.
type Options struct {
	Labels    []string // KEY=VALUE
	Namespace string   // the pod's own (POD_NAMESPACE)
}

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: FlagLabel, Usage: "KEY=VALUE, a label to set on the namespace (repeat it)",
			Action: func(_ *cli.Context, v []string) error { o.Labels = v; return nil }},
		&cli.StringFlag{Name: FlagNamespace, Usage: "the namespace to label: vgpud's own", EnvVars: []string{"POD_NAMESPACE"}, Destination: &o.Namespace},
	}
}
