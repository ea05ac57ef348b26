package configapi

import (
	"path/filepath"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The flags naming the files.
const (
	FlagNodeOverrides       = "node-overrides"
	FlagClusterSettingsFile = "cluster-settings-file"
)

// OverridesFile names node-overrides.yaml.
type OverridesFile struct {
	// NodeOverrides is the file's path (usually a ConfigMap key); "" for
	// none.
	NodeOverrides string
}

// Flag is --node-overrides, whose help names the keys settings bind.
func (o *OverridesFile) Flag(settings []Setting) cli.Flag {
	return &cli.StringFlag{Name: FlagNodeOverrides, Usage: "YAML file of per-node " + Keys(settings) + ", by node name or label (usually a ConfigMap key); empty for none", Value: o.NodeOverrides, Destination: &o.NodeOverrides}
}

// Validate reports what in o cannot work, by its flag.
func (o OverridesFile) Validate() field.ErrorList {
	return absolute(FlagNodeOverrides, o.NodeOverrides)
}

// SettingsFile names cluster-settings.yaml.
type SettingsFile struct {
	// ClusterSettingsFile is the file's path: the vgpud ConfigMap's
	// cluster-settings.yaml, which the leader reads each term and
	// follows. What it sets wins over the flags; "" or no file: the
	// flags alone.
	ClusterSettingsFile string
}

// Flag is --cluster-settings-file, whose help names the keys settings
// bind.
func (o *SettingsFile) Flag(settings []Setting) cli.Flag {
	return &cli.StringFlag{Name: FlagClusterSettingsFile, Usage: "YAML file of " + Keys(settings) + " (version: " + Version + ") that the leader reads each term and whenever it changes, winning over the flags; a value that does not validate is refused and logged, and what is in force stays. Usually the vgpud ConfigMap's cluster-settings.yaml; empty or absent: the flags alone", Value: o.ClusterSettingsFile, Destination: &o.ClusterSettingsFile}
}

// Validate reports what in o cannot work, by its flag.
func (o SettingsFile) Validate() field.ErrorList {
	return absolute(FlagClusterSettingsFile, o.ClusterSettingsFile)
}

// absolute refuses a relative path: the file is a mounted ConfigMap key.
func absolute(flag, path string) field.ErrorList {
	if path != "" && !filepath.IsAbs(path) {
		return field.ErrorList{field.Invalid(field.NewPath(flag), path, "want an absolute path, such as a mounted ConfigMap key, or empty for none")}
	}
	return nil
}
