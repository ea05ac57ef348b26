package cluster

import (
	"slices"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/cluster/internal/extender"
	"github.com/vgpud/vgpud/cluster/internal/leader"
	"github.com/vgpud/vgpud/cluster/internal/server"
	"github.com/vgpud/vgpud/cluster/internal/server/certs"
	"github.com/vgpud/vgpud/internal/configapi"
)

// Config is the cluster role's own settings: each part's, with its
// flags, defaults and checks in that part. What it shares with other
// parts (resource names, scheduler name, this pod's namespace) is passed
// to NewRole by main.
type Config struct {
	Leader leader.Options
	Server server.Options
	// TLS is the listener's certificate: the Secret it lives in, the
	// webhook whose caBundle trusts it, the Service it names. Its
	// Namespace is this pod's, filled by the Role.
	TLS certs.Config
	// Settings names cluster-settings.yaml, whose keys win over
	// Scheduling's flags.
	Settings   configapi.SettingsFile
	Scheduling extender.Options
}

// DefaultConfig returns the settings vgpud runs with when no flag is given.
func DefaultConfig() Config {
	return Config{
		Leader:     leader.DefaultOptions(),
		Server:     server.DefaultOptions(),
		TLS:        certs.DefaultConfig(),
		Scheduling: extender.DefaultOptions(),
	}
}

// Flags are the cluster role's settings, its parts' flags bound to c.
func (c *Config) Flags() []cli.Flag {
	return slices.Concat(c.Leader.Flags(), c.Server.Flags(), c.TLS.Flags(), []cli.Flag{c.Settings.Flag(c.fileSettings())}, c.Scheduling.Flags())
}

// Validate reports every cluster-role setting that cannot work, by its
// flag.
func (c Config) Validate() field.ErrorList {
	return slices.Concat(c.Leader.Validate(), c.Server.Validate(), c.TLS.Validate(), c.Settings.Validate(), c.Scheduling.Validate())
}

// fileSettings are the settings cluster-settings.yaml may set, bound to
// c (configapi).
func (c *Config) fileSettings() []configapi.Setting { return c.Scheduling.FileSettings() }
