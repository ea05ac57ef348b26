package node

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/vgpud/vgpud/internal/configapi"
	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/usage"
	"github.com/vgpud/vgpud/protocol"
)

// fileSettings are the settings node-overrides.yaml may change for the
// nodes an entry selects, bound to c: each key, the flag it overrides
// and the field it sets (configapi). backend is for test clusters whose
// nodes mock different machines; a real node keeps "nvml".
func (c *Config) fileSettings() []configapi.Setting {
	return []configapi.Setting{
		configapi.Bind("split", flagSplit, &c.Split).Range(MinSplit, MaxSplit),
		configapi.Bind("memoryScaling", flagMemoryScaling, &c.MemoryScaling),
		configapi.Bind("coreScaling", flagCoreScaling, &c.CoreScaling),
		configapi.Bind("exclude", flagExcludeGPUs, &c.ExcludeGPUs),
		configapi.Bind("backend", flagGPUBackend, &c.GPUBackend),
		configapi.Bind("gpuUsage", flagGPUUsage, &c.GPUUsage).OneOf(usage.Modes...),
		configapi.Bind("migOnDemand", flagMIGOnDemand, &c.MIGOnDemand),
	}
}

// OverrideSettings are the keys node-overrides.yaml may set, for the
// docs and the chart.
func OverrideSettings() []configapi.Setting {
	c := DefaultConfig()
	return c.fileSettings()
}

// ForNode reads the overrides file, if any, and returns c with the entry
// that selects node applied, under configapi's rules: a key the entry
// sets wins over the flag, one it leaves out keeps the flag's value.
// labels returns the node's labels, and is called only when the file
// selects by label (nil: configapi.ErrNeedsLabels then). Every entry is
// checked, not only the node's, so that a typo is not silently ignored;
// the node's entry is checked by Validate like the flags. The entry's
// lists are its own, never the flags' backing arrays.
func (c Config) ForNode(node string, labels func() (map[string]string, error)) (Config, error) {
	if c.NodeOverrides == "" {
		return c, nil
	}
	fail := func(err error) (Config, error) { return c, fmt.Errorf("node overrides %s: %w", c.NodeOverrides, err) }
	raw, err := configapi.ReadFile(c.NodeOverrides)
	if err != nil {
		return fail(err)
	}
	entries, err := configapi.Overrides(raw, c.fileSettings())
	if err != nil {
		return fail(err)
	}
	pick, err := configapi.Select(entries, node, labels)
	if err != nil && !errors.Is(err, configapi.ErrNeedsLabels) {
		return fail(err)
	}
	if err != nil || pick < 0 {
		return c, err
	}
	o := c
	entries[pick].Apply(o.fileSettings())
	if errs := o.Validate(); len(errs) > 0 {
		return c, fmt.Errorf("node overrides %s: %s on node %s: %w", c.NodeOverrides, configapi.Path(pick), node, configapi.InFileTerms(errs, o.fileSettings()).ToAggregate())
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
