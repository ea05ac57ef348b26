package node

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/node/gpu"
	"github.com/vgpud/vgpud/protocol"
)

// Overrides is the per-node settings file, usually a ConfigMap key:
//
//	nodes:
//	- name: gpu-a
//	  split: 4
//	  memoryScaling: 1.5
//	  exclude: ["0", "GPU-3f2a..."]
//	- name: test-node
//	  backend: "fake:4xNVIDIA L4:23034"
//
// A node not listed runs with the flags. backend is for test clusters
// whose nodes mock different machines; a real node keeps "nvml".
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
	Backend       *string  `json:"backend,omitempty"`
}

// ForNode reads the overrides file, if any, and returns c with node's
// entry applied. Unknown fields and duplicate nodes are errors, so a typo
// is not silently ignored.
func (c Config) ForNode(node string) (Config, error) {
	if c.NodeOverrides == "" {
		return c, nil
	}
	raw, err := os.ReadFile(c.NodeOverrides)
	if err != nil {
		return c, fmt.Errorf("node overrides: %w", err)
	}
	var o Overrides
	if err := yaml.UnmarshalStrict(raw, &o); err != nil {
		return c, fmt.Errorf("node overrides %s: %w; see the nodes: [{name, split, memoryScaling, coreScaling, exclude, backend}] format in the README", c.NodeOverrides, err)
	}
	seen := map[string]bool{}
	for i, n := range o.Nodes {
		if n.Name == "" {
			return c, fmt.Errorf("node overrides %s: nodes[%d] has no name", c.NodeOverrides, i)
		}
		if seen[n.Name] {
			return c, fmt.Errorf("node overrides %s: node %s is listed twice", c.NodeOverrides, n.Name)
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
			c.ExcludeGPUs = n.Exclude
		}
		if n.Backend != nil {
			if err := gpu.ValidateBackend(*n.Backend); err != nil {
				return c, fmt.Errorf("node overrides %s, node %s: %w", c.NodeOverrides, node, err)
			}
			c.GPUBackend = *n.Backend
		}
		if err := c.ValidateScaling(); err != nil {
			return c, fmt.Errorf("node overrides %s, node %s: %w", c.NodeOverrides, node, err)
		}
	}
	return c, nil
}

// Bounds of the settings a node override may change, shared by the flags
// and the overrides file: MinSplit..MaxSplit virtual devices per GPU, and
// scaling factors above 0 and at most MaxScaling.
const (
	MinSplit   = 1
	MaxSplit   = protocol.MaxSplit
	MaxScaling = protocol.MaxScaledCores / 100
)

// SplitProblem says what is wrong with a split value, "" if nothing.
func SplitProblem(n int) string {
	if n < MinSplit || n > MaxSplit {
		return fmt.Sprintf("want %d..%d", MinSplit, MaxSplit)
	}
	return ""
}

// ScalingProblem says what is wrong with a memory or core scaling factor,
// "" if nothing.
func ScalingProblem(f float64) string {
	if f <= 0 || f > MaxScaling {
		return fmt.Sprintf("want a factor above 0 and at most %d (1 = no oversubscription)", MaxScaling)
	}
	return ""
}

// ValidateScaling checks the settings a node override may change.
func (c Config) ValidateScaling() error {
	var errs []error
	if p := SplitProblem(c.Split); p != "" {
		errs = append(errs, fmt.Errorf("split %d: %s", c.Split, p))
	}
	if p := ScalingProblem(c.MemoryScaling); p != "" {
		errs = append(errs, fmt.Errorf("memoryScaling %v: %s", c.MemoryScaling, p))
	}
	if p := ScalingProblem(c.CoreScaling); p != "" {
		errs = append(errs, fmt.Errorf("coreScaling %v: %s", c.CoreScaling, p))
	}
	for _, e := range c.ExcludeGPUs {
		if e == "" {
			errs = append(errs, errors.New("exclude: an empty entry; want a GPU index or UUID"))
		}
	}
	return errors.Join(errs...)
}

// Excluded drops the GPUs named in c.Exclude by index or UUID. An entry
// that matches no GPU is an error: it is a typo or the wrong node.
func (c Config) Excluded(devs []gpu.Device) ([]gpu.Device, error) {
	matched := make([]bool, len(c.ExcludeGPUs))
	var out []gpu.Device
	for _, d := range devs {
		hit := false
		for i, e := range c.ExcludeGPUs {
			if e == d.UUID || e == strconv.Itoa(d.Index) {
				matched[i], hit = true, true
			}
		}
		if !hit {
			out = append(out, d)
		}
	}
	if i := slices.Index(matched, false); i >= 0 {
		return nil, fmt.Errorf("exclude %q matches no GPU on this node; want an index 0..%d or one of its UUIDs", c.ExcludeGPUs[i], len(devs)-1)
	}
	return out, nil
}
