package node

import (
	"errors"
	"fmt"

	"github.com/vgpud/vgpud/internal/configapi"
)

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
	if c.Overrides.NodeOverrides == "" {
		return c, nil
	}
	fail := func(err error) (Config, error) {
		return c, fmt.Errorf("node overrides %s: %w", c.Overrides.NodeOverrides, err)
	}
	raw, err := configapi.ReadFile(c.Overrides.NodeOverrides)
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
		return c, fmt.Errorf("node overrides %s: %s on node %s: %w", c.Overrides.NodeOverrides, configapi.Path(pick), node, configapi.InFileTerms(errs, o.fileSettings()).ToAggregate())
	}
	return o, nil
}
