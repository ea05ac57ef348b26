package podmodel

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

func container(limits map[string]string) *corev1.Container {
	l := corev1.ResourceList{}
	for k, v := range limits {
		l[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return &corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: l}}
}

func TestMIGProfileByItsResource(t *testing.T) {
	names := wellknown.DefaultResourceNames()
	r, err := ContainerRequestOf(container(map[string]string{"nvidia.com/mig-1g.5gb": "1"}), names)
	if err != nil || r.MIGProfile != "1g.5gb" || r.GPUs != 1 || !r.Wants() {
		t.Fatalf("got %+v, %v", r, err)
	}
	// With a task priority, which MIG ignores: still one profile.
	if r, err := ContainerRequestOf(container(map[string]string{"nvidia.com/mig-2g.10gb": "1", "nvidia.com/priority": "1"}), names); err != nil || r.MIGProfile != "2g.10gb" {
		t.Errorf("with a priority: %+v, %v", r, err)
	}
	for _, tc := range []struct {
		limits map[string]string
		want   string
	}{
		{map[string]string{"nvidia.com/mig-1g.5gb": "2"}, "within 1..1"},
		{map[string]string{"nvidia.com/mig-1g.5gb": "0"}, "within 1..1"},
		{map[string]string{"nvidia.com/mig-1g.5gb": "1", "nvidia.com/mig-2g.10gb": "1"}, "nvidia.com/mig-1g.5gb and nvidia.com/mig-2g.10gb; a process sees one MIG device"},
		{map[string]string{"nvidia.com/mig-1g.5gb": "1", "nvidia.com/gpumem": "1000"}, "asks nvidia.com/mig-1g.5gb and also nvidia.com/gpumem; ask one way"},
		{map[string]string{"nvidia.com/mig-1g.5gb": "1", "nvidia.com/gpu": "1"}, "and also nvidia.com/gpu;"},
		{map[string]string{"nvidia.com/mig-1G.5GB": "1"}, "names no MIG profile"},
	} {
		if _, err := ContainerRequestOf(container(tc.limits), names); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want an error saying %q", tc.limits, err, tc.want)
		}
	}
	c := container(map[string]string{"nvidia.com/mig-3g.20gb": "1"})
	if got := VGPUNames(c, names); len(got) != 1 || got[0] != "nvidia.com/mig-3g.20gb" {
		t.Errorf("VGPUNames = %v", got)
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{*c}}}
	if !Wants(pod, names) {
		t.Error("a pod asking only a MIG profile is not a vGPU pod")
	}
	if NeedsDevices(pod, names) {
		t.Error("a MIG profile's devices come from its own resource, not the GPU resource's plugin")
	}
}

func TestModeOf(t *testing.T) {
	profile := []ContainerRequest{{Name: "a", GPUs: 1}, {Name: "b", GPUs: 1, MIGProfile: "1g.5gb"}}
	plain := []ContainerRequest{{Name: "a", GPUs: 1}}
	for _, tc := range []struct {
		a    map[string]string
		cs   []ContainerRequest
		want GPUMode
		err  string
	}{
		{nil, plain, ModeAny, ""},
		{nil, profile, ModeMIG, ""},
		{map[string]string{wellknown.AnnotationGPUMode: "mig"}, profile, ModeMIG, ""},
		{map[string]string{wellknown.AnnotationGPUMode: "shared"}, profile, "", `container "b" asks MIG profile 1g.5gb, but`},
		{map[string]string{wellknown.AnnotationGPUModeHAMi: "hami-core"}, profile, "", "set it to mig"},
		{map[string]string{wellknown.AnnotationGPUMode: "shared"}, plain, ModeShared, ""},
	} {
		m, err := ModeOf(tc.a, tc.cs)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: %v; want an error saying %q", tc.a, err, tc.err)
		case tc.err == "" && (err != nil || m != tc.want):
			t.Errorf("%v: %q, %v; want %q", tc.a, m, err, tc.want)
		}
	}
}

func TestUnknownMIGProfileRefused(t *testing.T) {
	_, err := ContainerRequestOf(container(map[string]string{"nvidia.com/mig-9g.99gb": "1"}), wellknown.DefaultResourceNames())
	if err == nil || !strings.Contains(err.Error(), "asks nvidia.com/mig-9g.99gb, a MIG profile vgpud's scheduler is not configured for; it serves 1g.5gb, ") {
		t.Errorf("got %v", err)
	}
}
