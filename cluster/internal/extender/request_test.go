package extender

import (
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func TestNodePolicyIsOneName(t *testing.T) {
	keys := []string{wellknown.AnnotationNodePolicy, wellknown.AnnotationNodePolicyHAMi}
	if p, err := policy(map[string]string{keys[0]: "spread", keys[1]: "binpack"}, podmodel.Binpack, keys...); err != nil || p != podmodel.Spread {
		t.Errorf("vgpud's name wins: %q, %v", p, err)
	}
	if _, err := policy(map[string]string{keys[1]: "binpack,spread"}, podmodel.Binpack, keys...); err == nil || !strings.Contains(err.Error(), "want binpack or spread") {
		t.Errorf("a node policy chain: %v", err)
	}
}
