package manifests

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/protocol/containerenv"
)

// The vgpud-slice-env policy refuses exactly the names vgpud owns
// (protocol/containerenv/owned.go): each kind in its own variable, the names a pod
// may set to some values compared against those values.
func TestSliceEnvPolicyNamesWhatVgpudOwns(t *testing.T) {
	policy := admissionPolicy(t, "vgpud-slice-env")
	vars := map[string]string{}
	for _, v := range policy.Spec.Variables {
		vars[v.Name] = v.Expression
	}
	quoted := regexp.MustCompile(`'([A-Z_]+)'`)
	keys := func(expr string) []string {
		var out []string
		for _, m := range quoted.FindAllStringSubmatch(expr, -1) {
			out = append(out, m[1])
		}
		slices.Sort(out)
		return out
	}
	check := func(kind, mapVar, badVar string, names []string, prefixes []string) {
		t.Helper()
		var inMap []string
		for _, n := range names {
			if len(containerenv.AllowedEnvValues(n)) > 0 {
				// Compared with its values in the check itself.
				clause := fmt.Sprintf("e.name == '%s' && !(has(e.value) && e.value in ['%s'])", n, strings.Join(containerenv.AllowedEnvValues(n), "', '"))
				if !strings.Contains(vars[badVar], clause) {
					t.Errorf("%s: %s lacks %q", kind, badVar, clause)
				}
				continue
			}
			inMap = append(inMap, n)
		}
		slices.Sort(inMap)
		if got := keys(vars[mapVar]); !slices.Equal(got, inMap) {
			t.Errorf("%s names: the policy's %s has %v, protocol %v", kind, mapVar, got, inMap)
		}
		for _, p := range prefixes {
			if !strings.Contains(vars[badVar], "e.name.startsWith('"+p+"')") {
				t.Errorf("%s: %s does not refuse the prefix %s", kind, badVar, p)
			}
		}
	}
	check("device", "device", "badDevice", containerenv.DeviceEnvNames(), nil)
	check("slice", "slice", "badSlice", containerenv.SliceEnvNames(), containerenv.SliceEnvPrefixes())
	if !strings.Contains(vars["badSlice"], "variables.gpuContainers.") || strings.Contains(vars["badSlice"], "variables.ephemeral") {
		t.Error("slice names must be checked on the containers that ask for a GPU, and only those")
	}
}

// admissionPolicy is the ValidatingAdmissionPolicy name in
// manifests/vgpud.yaml, read strictly.
func admissionPolicy(t *testing.T, name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	for _, doc := range strings.Split(install, "\n---\n") {
		if strings.Contains(doc, "\nkind: ValidatingAdmissionPolicy\n") && strings.Contains(doc, "\n  name: "+name+"\n") {
			policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err := yaml.UnmarshalStrict([]byte(doc), policy); err != nil {
				t.Fatal(err)
			}
			return policy
		}
	}
	t.Fatalf("manifests/vgpud.yaml has no ValidatingAdmissionPolicy %s", name)
	return nil
}
