package cluster

// The cluster settings file: the scheduling defaults, which the leader
// reads at the start of each term and again whenever the file changes,
// so that a platform team changes a policy by editing the vgpud
// ConfigMap, with no replica restarted and no device plugin
// re-registered. It holds only settings the leader applies per call;
// the rest stay flags.

import (
	"bytes"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/cluster/internal/extender"
	"github.com/vgpud/vgpud/cluster/internal/fit"
)

// settingsVersion is the file's format.
const settingsVersion = "v1"

// maxSettingsBytes bounds the file: a ConfigMap key, a few lines.
const maxSettingsBytes = 64 << 10

// settingsFile is the file's shape; a key left out keeps the flag's value.
type settingsFile struct {
	Version                 string  `json:"version"`
	NodePolicy              *string `json:"nodePolicy,omitempty"`
	GPUPolicy               *string `json:"gpuPolicy,omitempty"`
	DefaultGPUMemPercentage *int    `json:"defaultGPUMemPercentage,omitempty"`
	DefaultGPUCores         *int    `json:"defaultGPUCores,omitempty"`
}

// settingsKeys names each flag the file may set by its key there, for
// the errors Validate reports by flag.
var settingsKeys = map[string]string{
	flagNodePolicy:              "nodePolicy",
	flagGPUPolicy:               "gpuPolicy",
	flagDefaultGPUMemPercentage: "defaultGPUMemPercentage",
	flagDefaultGPUCores:         "defaultGPUCores",
}

// withSettings is c with the settings in raw applied, checked by the same
// rules as the flags (Validate). An empty file, or one of comments
// alone, changes nothing.
func (c Config) withSettings(raw []byte) (Config, error) {
	if len(raw) > maxSettingsBytes {
		return c, fmt.Errorf("%d bytes, more than %d", len(raw), maxSettingsBytes)
	}
	var f settingsFile
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		return c, fmt.Errorf("want YAML with version: %s and nodePolicy, gpuPolicy, defaultGPUMemPercentage or defaultGPUCores: %w", settingsVersion, err)
	}
	if f == (settingsFile{}) && len(bytes.TrimSpace(uncommented(raw))) == 0 {
		return c, nil
	}
	if f.Version != settingsVersion {
		return c, fmt.Errorf("version %q: want version: %s", f.Version, settingsVersion)
	}
	set(&c.NodePolicy, f.NodePolicy)
	set(&c.GPUPolicy, f.GPUPolicy)
	set(&c.DefaultGPUMemPercentage, f.DefaultGPUMemPercentage)
	set(&c.DefaultGPUCores, f.DefaultGPUCores)
	var errs field.ErrorList
	for _, e := range c.Validate() {
		if k, ok := settingsKeys[e.Field]; ok {
			e := *e
			e.Field = k
			errs = append(errs, &e)
		}
	}
	if len(errs) > 0 {
		return c, errs.ToAggregate()
	}
	return c, nil
}

// uncommented is raw without its comment lines.
func uncommented(raw []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(raw, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// set overwrites *to with *from where the file set it.
func set[T any](to *T, from *T) {
	if from != nil {
		*to = *from
	}
}

// defaults are the extender's Defaults under c.
func (c Config) defaults() extender.Defaults {
	return extender.Defaults{
		NodePolicy: c.NodePolicy,
		GPUPolicy:  c.GPUPolicy,
		Options:    fit.Options{DefaultMemPercent: c.DefaultGPUMemPercentage, DefaultCores: c.DefaultGPUCores},
	}
}

// readSettings reads the settings file, if c names one, onto c.
func (c Config) readSettings() (Config, error) {
	if c.SettingsFile == "" {
		return c, nil
	}
	raw, err := os.ReadFile(c.SettingsFile)
	if os.IsNotExist(err) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("cluster settings %s: %w", c.SettingsFile, err)
	}
	out, err := c.withSettings(raw)
	if err != nil {
		return c, fmt.Errorf("cluster settings %s: %w", c.SettingsFile, err)
	}
	return out, nil
}
