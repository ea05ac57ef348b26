package cluster

// The cluster settings file: the scheduling defaults, which the leader
// reads at the start of each term and again whenever the file changes,
// so that a platform team changes a policy by editing the vgpud
// ConfigMap, with no replica restarted and no device plugin
// re-registered. It holds only settings the leader applies per call;
// the rest stay flags.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"

	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
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
// alone, changes nothing. Keys are case-sensitive and may appear once,
// a null is refused rather than read as "left out", and the file is one
// YAML document: what kubectl would show is what is in force.
func (c Config) withSettings(raw []byte) (Config, error) {
	if len(raw) > maxSettingsBytes {
		return c, fmt.Errorf("%d bytes, more than %d", len(raw), maxSettingsBytes)
	}
	if len(bytes.TrimSpace(uncommented(raw))) == 0 {
		return c, nil
	}
	if docs := documentStart.FindAllIndex(raw, -1); len(docs) > 1 || (len(docs) == 1 && len(bytes.TrimSpace(uncommented(raw[:docs[0][0]]))) > 0) {
		return c, fmt.Errorf("more than one YAML document: keep one, with version: %s", settingsVersion)
	}
	j, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return c, fmt.Errorf("want YAML with version: %s and nodePolicy, gpuPolicy, defaultGPUMemPercentage or defaultGPUCores: %w", settingsVersion, err)
	}
	var keys map[string]any
	if err := json.Unmarshal(j, &keys); err != nil {
		return c, fmt.Errorf("want a YAML mapping with version: %s: %w", settingsVersion, err)
	}
	for k, v := range keys {
		if v == nil {
			return c, fmt.Errorf("%s is null: give it a value, or leave it out for its flag's", k)
		}
	}
	var f settingsFile
	strict, err := kjson.UnmarshalStrict(j, &f)
	if err == nil && len(strict) > 0 {
		err = errors.Join(strict...)
	}
	if err != nil {
		return c, fmt.Errorf("want version: %s and nodePolicy, gpuPolicy, defaultGPUMemPercentage or defaultGPUCores, each once: %w", settingsVersion, err)
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

// documentStart is a YAML document marker line.
var documentStart = regexp.MustCompile(`(?m)^---[ \t]*(#.*)?$`)

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
	raw, err := readSmall(c.SettingsFile, maxSettingsBytes)
	if errors.Is(err, fs.ErrNotExist) {
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

// readSmall reads a regular file of at most max bytes: a FIFO or a device
// in its place must not block the leader.
func readSmall(path string, max int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max+1))
}
