package podmodel

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

func ctr(name string, limits map[string]string) corev1.Container {
	c := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}
	for k, v := range limits {
		c.Resources.Limits[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return c
}

func TestPodRequestsOrderAndValues(t *testing.T) {
	names := wellknown.DefaultResourceNames()
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{ctr("init", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})},
		Containers: []corev1.Container{
			ctr("main", map[string]string{"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "30", "nvidia.com/priority": "1"}),
			ctr("sidecar", nil),
		},
	}}
	always := corev1.ContainerRestartPolicyAlways
	proxy := ctr("proxy", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "200"})
	proxy.RestartPolicy = &always
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, proxy)
	// A request without a limit is read too.
	pod.Spec.Containers[1].Resources.Requests = corev1.ResourceList{"nvidia.com/gpumem": resource.MustParse("512")}
	got, err := Requests(pod, names)
	if err != nil {
		t.Fatal(err)
	}
	want := []ContainerRequest{
		{Name: "init", Kind: KindInit, GPUs: 1, HasGPUs: true, MemoryMiB: 1000},
		{Name: "proxy", Kind: KindSidecar, GPUs: 1, HasGPUs: true, MemoryMiB: 200},
		{Name: "main", GPUs: 2, HasGPUs: true, MemoryPercent: 50, Cores: 30, Priority: 1, HasPriority: true},
		{Name: "sidecar", MemoryMiB: 512},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d requests", len(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("[%d] got %+v want %+v", i, got[i], want[i])
		}
	}
	if !Wants(pod, names) {
		t.Error("PodWants = false")
	}
	if Wants(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr("x", map[string]string{"cpu": "1"})}}}, names) {
		t.Error("PodWants = true for a CPU pod")
	}
}

func TestContainerRequestRejects(t *testing.T) {
	names := wellknown.DefaultResourceNames()
	for _, tc := range []struct {
		limits map[string]string
		want   string
	}{
		{map[string]string{"nvidia.com/gpu": "-1"}, "within 0..64"},
		{map[string]string{"nvidia.com/gpu": "65"}, "within 0..64"},
		{map[string]string{"nvidia.com/gpu": "500m"}, "whole number"},
		{map[string]string{"nvidia.com/gpumem-percentage": "101"}, "within 1..100"},
		{map[string]string{"nvidia.com/gpucores": "150"}, "within 0..100"},
		{map[string]string{"nvidia.com/gpumem": "0"}, "within 1.."},
		{map[string]string{"nvidia.com/gpumem": "100Ti"}, "within 1.."},
		{map[string]string{"nvidia.com/gpu": "0", "nvidia.com/gpumem": "100"}, "is 0 but it asks"},
		{map[string]string{"nvidia.com/gpu": "0"}, "needs no GPU names no vGPU resource"},
		{map[string]string{"nvidia.com/gpumem": "100", "nvidia.com/gpumem-percentage": "10"}, "not both"},
	} {
		c := ctr("c", tc.limits)
		_, err := ContainerRequestOf(&c, names)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `container "c"`) {
			t.Errorf("%v: error %v, want one containing %q and the container name", tc.limits, err, tc.want)
		}
	}
}

func TestVGPUNamesIgnoresPriorityAlone(t *testing.T) {
	names := wellknown.DefaultResourceNames()
	c := corev1.Container{Resources: corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceName(names.Priority): resource.MustParse("1")},
		Requests: corev1.ResourceList{corev1.ResourceName(names.GPUCores): resource.MustParse("10")},
	}}
	if got := VGPUNames(&c, names); len(got) != 1 || got[0] != names.GPUCores {
		t.Fatalf("VGPUNames = %v", got)
	}
	if Wants(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceName(names.Priority): resource.MustParse("1")}}}}}}, names) {
		t.Error("Wants: priority alone asks for no GPU")
	}
}

// kubelet asks the device plugin only for a non-zero GPU count, whatever
// else the container names.
func TestNeedsDevices(t *testing.T) {
	names := wellknown.DefaultResourceNames()
	for _, tc := range []struct {
		name string
		c    corev1.Container
		want bool
	}{
		{"gpu 1", ctr("a", map[string]string{"nvidia.com/gpu": "1"}), true},
		{"gpu 0", ctr("a", map[string]string{"nvidia.com/gpu": "0"}), false},
		{"memory alone", ctr("a", map[string]string{"nvidia.com/gpumem": "1000"}), false},
		{"unreadable memory beside a count", ctr("a", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "-5"}), true},
	} {
		pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{tc.c}}}
		if got := NeedsDevices(pod, names); got != tc.want {
			t.Errorf("%s: NeedsDevices = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestContainersInKubeletOrder(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	spec := corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "setup"}, {Name: "proxy", RestartPolicy: &always}},
		Containers:     []corev1.Container{{Name: "main"}, {Name: "log"}},
	}
	var got []string
	for c, k := range Containers(&spec) {
		got = append(got, fmt.Sprintf("%s:%d", c.Name, k))
	}
	want := fmt.Sprintf("[setup:%d proxy:%d main:%d log:%d]", KindInit, KindSidecar, KindApp, KindApp)
	if fmt.Sprint(got) != want {
		t.Fatalf("Containers = %v, want %s", got, want)
	}
	for c := range Containers(&spec) {
		if c.Name != "setup" {
			t.Fatalf("stopping early yielded %s", c.Name)
		}
		break
	}
}

// The leader's informer asks Wants of every pod event: it allocates
// nothing, for a GPU pod or a CPU pod.
func TestWantsDoesNotAllocate(t *testing.T) {
	names := wellknown.DefaultResourceNames()
	gpu := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpumem": "1000"})}}}
	cpu := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"cpu": "1"})}}}
	if allocs := testing.AllocsPerRun(100, func() { _, _ = Wants(gpu, names), Wants(cpu, names) }); allocs != 0 {
		t.Errorf("Wants allocates %.0f times per call", allocs)
	}
}
