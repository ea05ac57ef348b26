package apicalls

import "testing"

func TestResourceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/ai/pods/p1/binding": "pods/binding",
		"/api/v1/namespaces/ai/pods/p1":         "pods",
		"/api/v1/namespaces/ai/pods":            "pods",
		"/api/v1/pods":                          "pods",
		"/api/v1/nodes/n1/status":               "nodes/status",
		"/api/v1/namespaces/ai":                 "namespaces",
		"/apis/coordination.k8s.io/v1/namespaces/vgpud-system/leases/vgpud": "leases",
		"/apis/events.k8s.io/v1/namespaces/ai/events":                       "events",
		"/api/v1":  "other",
		"/version": "other",
		"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/x": "mutatingwebhookconfigurations",
	} {
		if got := resourceOf(path); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}
