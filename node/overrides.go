package node

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/node/gpu"
)

// Overrides is the per-node settings file, usually a ConfigMap key:
//
//	nodes:
//	- name: gpu-a
//	  split: 4
//	  memoryScaling: 1.5
//	  exclude: ["0", "GPU-3f2a..."]
//
// A node not listed runs with the flags.
type Overrides struct {
	Nodes []NodeOverride `json:"nodes"`
}

// NodeOverride replaces the flags' values for one node; absent fields keep them.
type NodeOverride struct {
	Name          string   `json:"name"`
	Split         *int     `json:"split,omitempty"`
	MemoryScaling *float64 `json:"memoryScaling,omitempty"`
	CoreScaling   *float64 `json:"coreScaling,omitempty"`
	Exclude       []string `json:"exclude,omitempty"`
}

// ForNode reads the overrides file, if any, and returns c with node's
// entry applied. Unknown fields and duplicate nodes are errors, so a typo
// is not silently ignored.
func (c Config) ForNode(node string) (Config, error) {
	if c.OverridesFile == "" {
		return c, nil
	}
	raw, err := os.ReadFile(c.OverridesFile)
	if err != nil {
		return c, fmt.Errorf("node overrides: %w", err)
	}
	var o Overrides
	if err := yaml.UnmarshalStrict(raw, &o); err != nil {
		return c, fmt.Errorf("node overrides %s: %w; see the nodes: [{name, split, memoryScaling, coreScaling, exclude}] format in the README", c.OverridesFile, err)
	}
	seen := map[string]bool{}
	for i, n := range o.Nodes {
		if n.Name == "" {
			return c, fmt.Errorf("node overrides %s: nodes[%d] has no name", c.OverridesFile, i)
		}
		if seen[n.Name] {
			return c, fmt.Errorf("node overrides %s: node %s is listed twice", c.OverridesFile, n.Name)
		}
		seen[n.Name] = true
		if n.Name != node {
			continue
		}
		if n.Split != nil {
			c.Split = *n.Split
		}
		if n.MemoryScaling != nil {
			c.MemoryScaling = *n.MemoryScaling
		}
		if n.CoreScaling != nil {
			c.CoreScaling = *n.CoreScaling
		}
		if n.Exclude != nil {
			c.Exclude = n.Exclude
		}
		if err := c.ValidateScaling(); err != nil {
			return c, fmt.Errorf("node overrides %s, node %s: %w", c.OverridesFile, node, err)
		}
	}
	return c, nil
}

// ValidSplit and ValidScaling are the bounds of split and of the memory
// and core factors, shared by the flags and the per-node overrides.
func ValidSplit(n int) bool       { return n >= 1 && n <= 1000 }
func ValidScaling(f float64) bool { return f > 0 && f <= 100 }

// ValidateScaling checks the settings a node override may change.
func (c Config) ValidateScaling() error {
	var errs []error
	if !ValidSplit(c.Split) {
		errs = append(errs, fmt.Errorf("split %d: want 1..1000", c.Split))
	}
	if !ValidScaling(c.MemoryScaling) {
		errs = append(errs, fmt.Errorf("memory scaling %v: want a factor above 0 and at most 100 (1 = no oversubscription)", c.MemoryScaling))
	}
	if !ValidScaling(c.CoreScaling) {
		errs = append(errs, fmt.Errorf("core scaling %v: want a factor above 0 and at most 100", c.CoreScaling))
	}
	for _, e := range c.Exclude {
		if e == "" {
			errs = append(errs, errors.New("exclude: an empty entry; want a GPU index or UUID"))
		}
	}
	return errors.Join(errs...)
}

// Excluded drops the GPUs named in c.Exclude by index or UUID. An entry
// that matches no GPU is an error: it is a typo or the wrong node.
func (c Config) Excluded(devs []gpu.Device) ([]gpu.Device, error) {
	matched := make([]bool, len(c.Exclude))
	var out []gpu.Device
	for _, d := range devs {
		hit := false
		for i, e := range c.Exclude {
			if e == d.UUID || e == strconv.Itoa(d.Index) {
				matched[i], hit = true, true
			}
		}
		if !hit {
			out = append(out, d)
		}
	}
	if i := slices.Index(matched, false); i >= 0 {
		return nil, fmt.Errorf("exclude %q matches no GPU on this node; want an index 0..%d or one of its UUIDs", c.Exclude[i], len(devs)-1)
	}
	return out, nil
}
