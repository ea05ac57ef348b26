package node

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/protocol"
)

// OverridesVersion is the per-node settings file's format. A file that
// names no version is read as this one, the only one there is.
const OverridesVersion = "v1"

// Overrides is the per-node settings file, usually a ConfigMap key:
//
//	version: v1
//	nodes:
//	- name: gpu-a
//	  split: 4
//	  memoryScaling: 1.5
//	  exclude: ["0", "GPU-3f2a..."]
//	- selector:
//	    matchLabels: {nvidia.com/gpu.product: NVIDIA-L4}
//	  split: 2
//	- name: test-node
//	  backend: "fake:4xNVIDIA L4:23034"
//
// An entry selects nodes by name or by label selector, not both; an entry
// naming the node wins over selectors, and two selectors that both match
// it are an error, since their order would decide. A node no entry
// selects runs with the flags. An entry's settings are the node role's
// own (Config's fields that have a JSON name) and are checked by
// Config.Validate like the flags. backend is for test clusters whose
// nodes mock different machines; a real node keeps "nvml".
type Overrides struct {
	Version string         `json:"version,omitempty"`
	Nodes   []NodeOverride `json:"nodes"`
}

// NodeOverride replaces the flags' values for the nodes it selects;
// absent settings keep them.
type NodeOverride struct {
	Name     string                `json:"name,omitempty"`
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	Config
}

// ForNode reads the overrides file, if any, and returns c with the entry
// that selects node applied; labels returns the node's labels, and is
// called only when the file selects by label. Unknown fields, duplicate
// names and settings Validate refuses are errors, so a typo is not
// silently ignored.
func (c Config) ForNode(node string, labels func() (map[string]string, error)) (Config, error) {
	if c.NodeOverrides == "" {
		return c, nil
	}
	raw, err := os.ReadFile(c.NodeOverrides)
	if err != nil {
		return c, fmt.Errorf("node overrides: %w", err)
	}
	var file struct {
		Version string            `json:"version,omitempty"`
		Nodes   []json.RawMessage `json:"nodes"`
	}
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		return c, fmt.Errorf("node overrides %s: %w; want version: %s and nodes: [{name or selector, split, memoryScaling, coreScaling, exclude, backend}] (docs/settings.md)", c.NodeOverrides, err, OverridesVersion)
	}
	if file.Version != "" && file.Version != OverridesVersion {
		return c, fmt.Errorf("node overrides %s: version %q is not one this vgpud reads; want %s", c.NodeOverrides, file.Version, OverridesVersion)
	}
	var byName, bySelector []int
	entries := make([]NodeOverride, len(file.Nodes))
	names := map[string]bool{}
	for i, rawEntry := range file.Nodes {
		// Each entry decodes onto the flags' values, so what it leaves
		// out keeps them.
		e := NodeOverride{Config: c}
		if err := yaml.UnmarshalStrict(rawEntry, &e); err != nil {
			return c, fmt.Errorf("node overrides %s: nodes[%d]: %w", c.NodeOverrides, i, err)
		}
		switch {
		case e.Name == "" && e.Selector == nil:
			return c, fmt.Errorf("node overrides %s: nodes[%d] has neither name nor selector", c.NodeOverrides, i)
		case e.Name != "" && e.Selector != nil:
			return c, fmt.Errorf("node overrides %s: nodes[%d] has both name and selector; give one", c.NodeOverrides, i)
		case names[e.Name]:
			return c, fmt.Errorf("node overrides %s: node %s is listed twice", c.NodeOverrides, e.Name)
		case e.Name != "":
			names[e.Name] = true
			if e.Name == node {
				byName = append(byName, i)
			}
		default:
			bySelector = append(bySelector, i)
		}
		entries[i] = e
	}
	pick := -1
	if len(byName) > 0 {
		pick = byName[0]
	} else if len(bySelector) > 0 {
		var matched []int
		nodeLabels, err := labels()
		if err != nil {
			return c, fmt.Errorf("node overrides %s: read node %s's labels for the entries that select by label: %w", c.NodeOverrides, node, err)
		}
		for _, i := range bySelector {
			sel, err := metav1.LabelSelectorAsSelector(entries[i].Selector)
			if err != nil {
				return c, fmt.Errorf("node overrides %s: nodes[%d].selector: %w", c.NodeOverrides, i, err)
			}
			if sel.Matches(k8slabels.Set(nodeLabels)) {
				matched = append(matched, i)
			}
		}
		if len(matched) > 1 {
			return c, fmt.Errorf("node overrides %s: nodes[%d] and nodes[%d] both select node %s by label; make the selectors exclusive or name the node", c.NodeOverrides, matched[0], matched[1], node)
		}
		if len(matched) == 1 {
			pick = matched[0]
		}
	}
	if pick < 0 {
		return c, nil
	}
	o := entries[pick].Config
	if errs := o.Validate(); len(errs) > 0 {
		return c, fmt.Errorf("node overrides %s: nodes[%d] on node %s: %w", c.NodeOverrides, pick, node, errs.ToAggregate())
	}
	return o, nil
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
