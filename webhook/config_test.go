package webhook

import (
	"slices"
	"testing"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if c.CorePolicy != "" || c.VisibleDevicesNone || c.RuntimeClass != "" {
		t.Fatalf("mutation defaults: %+v", c)
	}
	if !slices.Equal(CorePolicies(), []string{"default", "force"}) {
		t.Fatalf("CorePolicies = %v", CorePolicies())
	}
}
