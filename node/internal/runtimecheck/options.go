package runtimecheck

import (
	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/node/internal/preflight"
)

// FlagRuntimeConfig is Options.RuntimeConfig's flag.
const FlagRuntimeConfig = "runtime-config"

// Options say which runtime configuration the check reads.
type Options struct {
	// RuntimeConfig is the container runtime's configuration, KIND:PATH
	// (preflight.ParseSpec), which the node reads every minute to say
	// whether the runtime fails closed without vgpud; "" reads none.
	// PATH must be visible at the same path inside vgpud's container.
	RuntimeConfig string
}

// DefaultOptions read containerd's.
func DefaultOptions() Options {
	return Options{RuntimeConfig: "containerd:/etc/containerd/config.toml"}
}

// RuntimeConfigFlag is --runtime-config, which `vgpud preflight` and
// `vgpud node-setup` share with the role.
func (o *Options) RuntimeConfigFlag() cli.Flag {
	return &cli.StringFlag{Name: FlagRuntimeConfig, Usage: "the container runtime's configuration as KIND:PATH, KIND containerd or cri-o (CRI-O reads crio.conf.d beside PATH), read with its imports or drop-ins to say whether the runtime fails closed without vgpud; PATH as seen in vgpud's container, where the host's directory is mounted at the same path; empty reads none", Value: o.RuntimeConfig, Destination: &o.RuntimeConfig}
}

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag { return []cli.Flag{o.RuntimeConfigFlag()} }

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	if _, err := preflight.ParseSpec(o.RuntimeConfig); err != nil {
		return field.ErrorList{field.Invalid(field.NewPath(FlagRuntimeConfig), o.RuntimeConfig, err.Error()+", or empty to read none")}
	}
	return nil
}
