package manifests

import "testing"

// Without Pod Security baseline a tenant with edit runs a privileged or
// hostPath pod and reaches around every fence; the example must say so.
func TestTenantExampleEnforcesBaseline(t *testing.T) {
	labels, err := TenantLabels()
	if err != nil {
		t.Fatal(err)
	}
	if l := labels["pod-security.kubernetes.io/enforce"]; l != "baseline" && l != "restricted" {
		t.Fatalf("tenant example enforces %q, want baseline or restricted", l)
	}
}
