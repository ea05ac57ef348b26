package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
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

// errNeedsLabels is ForNode's answer, with no labels func, for a file
// that selects by label and names no entry for the node.
var errNeedsLabels = errors.New("the node's labels are needed to select its entry")

// ForNode reads the overrides file, if any, and returns c with the entry
// that selects node applied; labels returns the node's labels, and is
// called only when the file selects by label (nil: errNeedsLabels then). Unknown fields, empty
// values, duplicate names and settings Validate refuses are errors, so a
// typo is not silently ignored.
func (c Config) ForNode(node string, labels func() (map[string]string, error)) (Config, error) {
	if c.NodeOverrides == "" {
		return c, nil
	}
	entries, err := c.readOverrides()
	if err != nil {
		return c, fmt.Errorf("node overrides %s: %w", c.NodeOverrides, err)
	}
	pick, err := selectOverride(entries, node, labels)
	if err != nil || pick < 0 {
		if err != nil && !errors.Is(err, errNeedsLabels) {
			err = fmt.Errorf("node overrides %s: %w", c.NodeOverrides, err)
		}
		return c, err
	}
	o := entries[pick].Config
	if errs := o.Validate(); len(errs) > 0 {
		return c, fmt.Errorf("node overrides %s: nodes[%d] on node %s: %w", c.NodeOverrides, pick, node, inFileTerms(errs).ToAggregate())
	}
	return o, nil
}

// readOverrides reads and checks every entry of the file, each decoded
// onto c's values, so what an entry leaves out keeps them.
func (c Config) readOverrides() ([]NodeOverride, error) {
	raw, err := os.ReadFile(c.NodeOverrides)
	if err != nil {
		return nil, err
	}
	var file struct {
		Version string            `json:"version,omitempty"`
		Nodes   []json.RawMessage `json:"nodes"`
	}
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		return nil, fmt.Errorf("%w; want version: %s and nodes: [{name or selector, split, memoryScaling, coreScaling, exclude, backend}] (docs/settings.md)", err, OverridesVersion)
	}
	if file.Version != "" && file.Version != OverridesVersion {
		return nil, fmt.Errorf("version %q is not one this vgpud reads; want %s", file.Version, OverridesVersion)
	}
	entries := make([]NodeOverride, len(file.Nodes))
	names := map[string]bool{}
	for i, rawEntry := range file.Nodes {
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(rawEntry, &keys); err != nil {
			return nil, fmt.Errorf("nodes[%d]: want a mapping: %w", i, err)
		}
		for k, v := range keys {
			if string(v) == "null" {
				// A key with no value would clear the flag's setting, which
				// an absent key keeps: say which was meant.
				return nil, fmt.Errorf("nodes[%d].%s has no value; give one (for exclude, [] excludes nothing), or leave the key out to keep the flag's", i, k)
			}
		}
		// The slices are the entry's own: decoding into the flags' backing
		// arrays would change the flags' value for every other entry.
		base := c
		base.ExcludeGPUs = slices.Clone(c.ExcludeGPUs)
		base.MIGOnDemand = slices.Clone(c.MIGOnDemand)
		base.HealthIgnoreXIDs = slices.Clone(c.HealthIgnoreXIDs)
		base.NRIExemptNamespaces = slices.Clone(c.NRIExemptNamespaces)
		base.NRIEarlyNamespaces = slices.Clone(c.NRIEarlyNamespaces)
		e := NodeOverride{Config: base}
		if err := yaml.UnmarshalStrict(rawEntry, &e); err != nil {
			return nil, fmt.Errorf("nodes[%d]: %w", i, err)
		}
		switch {
		case e.Name == "" && e.Selector == nil:
			return nil, fmt.Errorf("nodes[%d] has neither name nor selector", i)
		case e.Name != "" && e.Selector != nil:
			return nil, fmt.Errorf("nodes[%d] has both name and selector; give one", i)
		case e.Selector != nil && len(e.Selector.MatchLabels) == 0 && len(e.Selector.MatchExpressions) == 0:
			return nil, fmt.Errorf("nodes[%d].selector is empty and would select every node; the flags are every node's settings", i)
		case names[e.Name]:
			return nil, fmt.Errorf("node %s is listed twice", e.Name)
		}
		if e.Name != "" {
			names[e.Name] = true
		}
		entries[i] = e
	}
	return entries, nil
}

// selectOverride returns the index of the entry that selects node, -1 for
// none: the one naming it, else the one selector matching its labels.
func selectOverride(entries []NodeOverride, node string, labels func() (map[string]string, error)) (int, error) {
	var bySelector []int
	for i, e := range entries {
		if e.Name == node {
			return i, nil
		}
		if e.Selector != nil {
			bySelector = append(bySelector, i)
		}
	}
	if len(bySelector) == 0 {
		return -1, nil
	}
	if labels == nil {
		return -1, errNeedsLabels
	}
	nodeLabels, err := labels()
	if err != nil {
		return -1, fmt.Errorf("read node %s's labels for the entries that select by label: %w", node, err)
	}
	var matched []int
	for _, i := range bySelector {
		sel, err := metav1.LabelSelectorAsSelector(entries[i].Selector)
		if err != nil {
			return -1, fmt.Errorf("nodes[%d].selector: %w", i, err)
		}
		if sel.Matches(k8slabels.Set(nodeLabels)) {
			matched = append(matched, i)
		}
	}
	switch len(matched) {
	case 0:
		return -1, nil
	case 1:
		return matched[0], nil
	}
	return -1, fmt.Errorf("nodes[%d] and nodes[%d] both select node %s by label; make the selectors exclusive or name the node", matched[0], matched[1], node)
}

// overrideKeys are the file's keys of the settings an entry may change,
// by the flag that sets each from the command line.
func overrideKeys() map[string]string {
	return map[string]string{flagGPUBackend: "backend", flagSplit: "split", flagMemoryScaling: "memoryScaling", flagCoreScaling: "coreScaling", flagExcludeGPUs: "exclude", flagGPUUsage: "gpuUsage", flagMIGOnDemand: "migOnDemand"}
}

// inFileTerms names each finding by the file's key rather than the flag.
func inFileTerms(errs field.ErrorList) field.ErrorList {
	keys := overrideKeys()
	out := make(field.ErrorList, 0, len(errs))
	for _, e := range errs {
		c := *e
		if k, ok := keys[c.Field]; ok {
			c.Field = k
		}
		out = append(out, &c)
	}
	return out
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
	out, unmatched := c.exclude(devs)
	if len(unmatched) > 0 {
		return nil, fmt.Errorf("exclude %q matches no GPU on this node; want an index 0..%d or one of its UUIDs", unmatched[0], len(devs)-1)
	}
	return out, nil
}

// exclude is devs without the excluded GPUs, and the exclusions that
// match none: after a rescan, a GPU excluded by UUID may be the one gone.
func (c Config) exclude(devs []gpu.Device) ([]gpu.Device, []string) {
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
	var unmatched []string
	for i, ok := range matched {
		if !ok {
			unmatched = append(unmatched, c.ExcludeGPUs[i])
		}
	}
	return out, unmatched
}
