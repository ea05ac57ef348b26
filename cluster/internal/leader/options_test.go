package leader

import "testing"

// The Lease lives in this pod's namespace unless a flag says otherwise,
// as the flag's help promises: an install in another namespace must not
// campaign for a Lease its Role cannot reach.
func TestLeaseNamespaceDefaultsToThePodNamespace(t *testing.T) {
	o := DefaultOptions()
	if got := o.Namespace("gpu-sharing"); got != "gpu-sharing" {
		t.Errorf("lease namespace %q, want the pod's namespace", got)
	}
	o.LeaseNamespace = "elsewhere"
	if got := o.Namespace("gpu-sharing"); got != "elsewhere" {
		t.Errorf("lease namespace %q, want the flag's", got)
	}
}
