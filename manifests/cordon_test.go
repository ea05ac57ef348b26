package manifests

import (
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/protocol"
)

// The vgpud-gpu-cordon policy accepts what the leader parses: the same
// entry pattern and bound (protocol/cordon.go).
func TestCordonPolicyMatchesTheParser(t *testing.T) {
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	for _, doc := range strings.Split(install, "\n---\n") {
		if strings.Contains(doc, "\nkind: ValidatingAdmissionPolicy\n") && strings.Contains(doc, "\n  name: vgpud-gpu-cordon\n") {
			policy = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err := yaml.UnmarshalStrict([]byte(doc), policy); err != nil {
				t.Fatal(err)
			}
		}
	}
	if policy == nil {
		t.Fatal("manifests/vgpud.yaml has no ValidatingAdmissionPolicy vgpud-gpu-cordon")
	}
	var all string
	for _, v := range policy.Spec.Validations {
		all += v.Expression + "\n"
	}
	for _, want := range []string{
		fmt.Sprintf("matches('%s')", protocol.CordonEntryPattern()),
		fmt.Sprintf("size(bytes(object.metadata.annotations[k])) <= %d", protocol.MaxCordonBytes),
		"'" + protocol.AnnotationCordon + "'",
		"'" + protocol.AnnotationCordonHAMi + "'",
	} {
		if !strings.Contains(all+policy.Spec.Variables[0].Expression, want) {
			t.Errorf("policy vgpud-gpu-cordon lacks %s", want)
		}
	}
}
