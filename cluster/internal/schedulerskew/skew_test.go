package schedulerskew

import (
	"strings"
	"testing"

	apimachineryversion "k8s.io/apimachinery/pkg/version"
)

func TestSchedulerSkew(t *testing.T) {
	server := &apimachineryversion.Info{GitVersion: "v1.36.3"}
	for _, tc := range []struct {
		image, server, want string
	}{
		{"registry.k8s.io/kube-scheduler:v1.36.3", "", ""},
		{"registry.k8s.io/kube-scheduler:v1.36.0@sha256:ab", "v1.36.7+k3s1", ""},
		{"registry.example.com:5000/kube-scheduler:v1.35.2", "", "one minor release older than the apiserver's v1.36.3"},
		{"registry.k8s.io/kube-scheduler:v1.37.0", "", "outside Kubernetes' supported skew"},
		{"registry.k8s.io/kube-scheduler:v1.34.1", "", "outside Kubernetes' supported skew"},
		{"registry.example.com:5000/kube-scheduler@sha256:ab", "", "has no version tag"},
		{"registry.example.com:5000/kube-scheduler:latest", "", "has no version tag"},
	} {
		s := server
		if tc.server != "" {
			s = &apimachineryversion.Info{GitVersion: tc.server}
		}
		got := Skew(tc.image, s)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s beside %s: %q, want %q", tc.image, s.GitVersion, got, tc.want)
		}
		if got != "" && tc.want != "has no version tag" && !strings.Contains(got, "kube-scheduler:v1.36.x") {
			t.Errorf("%s: %q does not say what to set", tc.image, got)
		}
	}
}
