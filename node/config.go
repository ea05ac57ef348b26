// Package node is the node role, run by every replica: GPU discovery, the
// device plugin and its registration with kubelet, health, the inventory
// annotation and the inspect socket. Its parts live under internal/,
// private to it, each with its own settings; the binary starts it through
// this package alone: its Config (this file: the parts' settings joined,
// and per-node overrides.go), Role (role.go wires the parts once the
// GPUs are found, then runs them) and the entry points of its commands.
package node

import (
	"slices"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/internal/configapi"
	"github.com/vgpud/vgpud/node/internal/deviceplugin"
	"github.com/vgpud/vgpud/node/internal/dra"
	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/gpuuse"
	"github.com/vgpud/vgpud/node/internal/grant"
	"github.com/vgpud/vgpud/node/internal/health"
	"github.com/vgpud/vgpud/node/internal/identity"
	"github.com/vgpud/vgpud/node/internal/inspect"
	"github.com/vgpud/vgpud/node/internal/inventory"
	"github.com/vgpud/vgpud/node/internal/migondemand"
	"github.com/vgpud/vgpud/node/internal/rescan"
	"github.com/vgpud/vgpud/node/internal/runtimecheck"
	"github.com/vgpud/vgpud/protocol/dradevices"
)

// Config is the node role's settings: each part's own, with its flags,
// defaults and checks in that part.
type Config struct {
	GPUs      gpu.Options
	Sharing   inventory.Options
	Plugin    deviceplugin.Options
	Overrides configapi.OverridesFile
	Health    health.Options
	Rescan    rescan.Options
	MIG       migondemand.Options
	Slices    grant.Options
	Identity  identity.Options
	Runtime   runtimecheck.Options
	Usage     gpuuse.Options
	Inspect   inspect.Options
	DRA       dra.Options
	// ClaimDefaults are what a DRA claim that leaves memory or cores out
	// gets: the cluster's scheduling defaults (set by main from the
	// cluster role's settings, the settings file's where it names them),
	// which the node publishes as its devices' request policies.
	ClaimDefaults dradevices.ClaimDefaults
	// Pod is this replica's pod, namespace/name (from --pod-namespace and
	// --pod-name): after a kubelet restart the plugin says serving only
	// once kubelet lists it on Plugin.PodResourcesSocket. "" does not
	// wait.
	Pod string
}

// DefaultConfig returns the settings vgpud runs with when no flag is given.
func DefaultConfig() Config {
	return Config{
		GPUs:     gpu.DefaultOptions(),
		Sharing:  inventory.DefaultOptions(),
		Plugin:   deviceplugin.DefaultOptions(),
		Health:   health.DefaultOptions(),
		Rescan:   rescan.DefaultOptions(),
		MIG:      migondemand.DefaultOptions(),
		Identity: identity.DefaultOptions(),
		Runtime:  runtimecheck.DefaultOptions(),
		Usage:    gpuuse.DefaultOptions(),
		Inspect:  inspect.DefaultOptions(),
		DRA:      dra.DefaultOptions(),
	}
}

// Flags are the node role's settings, its parts' flags bound to c. A list
// flag replaces its default when given, as comma-separated values.
func (c *Config) Flags() []cli.Flag {
	return slices.Concat(c.GPUs.Flags(), c.Plugin.Flags(), c.Sharing.Flags(), []cli.Flag{c.Overrides.Flag(c.fileSettings())},
		c.Health.Flags(), c.Rescan.Flags(), c.MIG.Flags(), c.Slices.Flags(), c.Runtime.Flags(), c.Identity.Flags(), c.Usage.Flags(), c.Inspect.Flags(), c.DRA.Flags())
}

// Validate reports every node-role setting that cannot work, by its flag.
// Per-node overrides are read and checked with it when the role starts
// (ForNode), on the node they select.
func (c Config) Validate() field.ErrorList {
	return slices.Concat(c.GPUs.Validate(), c.Sharing.Validate(), c.Plugin.Validate(), c.Overrides.Validate(), c.Health.Validate(), c.Rescan.Validate(),
		c.MIG.Validate(), c.Slices.Validate(), c.Runtime.Validate(), c.Identity.Validate(), c.Usage.Validate(), c.Inspect.Validate(), c.DRA.Validate())
}

// fileSettings are the settings node-overrides.yaml may change for the
// nodes an entry selects, bound to c (configapi).
func (c *Config) fileSettings() []configapi.Setting {
	return slices.Concat(c.Sharing.FileSettings(), c.GPUs.FileSettings(), c.Usage.FileSettings(), c.MIG.FileSettings(), c.DRA.FileSettings())
}
