package manifests

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// The vgpud-gpu-cordon policy accepts what the leader parses: the same
// entry pattern and bound (protocol/cordon.go).
func TestCordonPolicyMatchesTheParser(t *testing.T) {
	policy := admissionPolicy(t, "vgpud-gpu-cordon")
	var all string
	for _, v := range policy.Spec.Validations {
		all += v.Expression + "\n"
	}
	for _, want := range []string{
		fmt.Sprintf("matches('%s')", protocol.CordonEntryPattern()),
		fmt.Sprintf("size(bytes(object.metadata.annotations[k])) <= %d", protocol.MaxCordonBytes),
		"'" + wellknown.AnnotationCordon + "'",
		"'" + wellknown.AnnotationCordonHAMi + "'",
	} {
		if !strings.Contains(all+policy.Spec.Variables[0].Expression, want) {
			t.Errorf("policy vgpud-gpu-cordon lacks %s", want)
		}
	}
}
