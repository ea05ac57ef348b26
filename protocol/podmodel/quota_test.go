package podmodel

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// gpuContainer asks for gpus × (mem MiB, cores %); sidecar marks an init
// container that keeps running (restartPolicy Always).
func gpuContainer(gpus, mem, cores int64, sidecar bool) corev1.Container {
	names := wellknown.DefaultResourceNames()
	l := corev1.ResourceList{corev1.ResourceName(names.GPU): *resource.NewQuantity(gpus, resource.DecimalSI)}
	if mem > 0 {
		l[corev1.ResourceName(names.GPUMem)] = *resource.NewQuantity(mem, resource.DecimalSI)
	}
	if cores > 0 {
		l[corev1.ResourceName(names.GPUCores)] = *resource.NewQuantity(cores, resource.DecimalSI)
	}
	c := corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: l}}
	if sidecar {
		always := corev1.ContainerRestartPolicyAlways
		c.RestartPolicy = &always
	}
	return c
}

func TestPodUsage(t *testing.T) {
	tests := []struct {
		name string
		init []corev1.Container
		apps []corev1.Container
		want Usage
	}{
		{"none", nil, []corev1.Container{{Name: "web"}}, Usage{}},
		// Native quota would count 4000 here: one gpumem value, not one per GPU.
		{"multi-GPU", nil, []corev1.Container{gpuContainer(2, 4000, 30, false)}, Usage{MemMiB: 8000, Cores: 60, Slots: 2}},
		{"apps add up", nil, []corev1.Container{gpuContainer(1, 1000, 0, false), gpuContainer(3, 1000, 10, false)}, Usage{MemMiB: 4000, Cores: 30, Slots: 4}},
		{"init larger than apps", []corev1.Container{gpuContainer(1, 9000, 0, false)}, []corev1.Container{gpuContainer(1, 1000, 50, false)}, Usage{MemMiB: 9000, Cores: 50, Slots: 1}},
		{"init one at a time", []corev1.Container{gpuContainer(1, 3000, 0, false), gpuContainer(1, 3000, 0, false)}, []corev1.Container{gpuContainer(1, 1000, 0, false)}, Usage{MemMiB: 3000, Cores: 0, Slots: 1}},
		{"sidecar runs beside apps", []corev1.Container{gpuContainer(1, 2000, 0, true)}, []corev1.Container{gpuContainer(1, 1000, 0, false)}, Usage{MemMiB: 3000, Cores: 0, Slots: 2}},
		{"sidecar beside later init", []corev1.Container{gpuContainer(1, 2000, 0, true), gpuContainer(1, 5000, 0, false)}, []corev1.Container{gpuContainer(1, 1000, 0, false)}, Usage{MemMiB: 7000, Cores: 0, Slots: 2}},
		{"percentage not counted", nil, []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem-percentage": resource.MustParse("50")}}}}, Usage{Slots: 1}},
	}
	for _, tt := range tests {
		pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: tt.init, Containers: tt.apps}}
		got, err := PodUsage(pod, wellknown.DefaultResourceNames(), 0)
		if err != nil || got != tt.want {
			t.Errorf("%s: PodUsage = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
	bad := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{gpuContainer(1, 0, 200, false)}}}
	if _, err := PodUsage(bad, wellknown.DefaultResourceNames(), 0); err == nil {
		t.Error("cores 200: want an error")
	}
}

// A container with every core holds its GPUs whole: before the GPU is
// chosen it counts at least the smallest GPU's memory for each, however
// little it names; a shared one counts what it names.
func TestPodUsageChargesAWholeGPU(t *testing.T) {
	names := wellknown.DefaultResourceNames()
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{gpuContainer(2, 1, 100, false), gpuContainer(1, 1000, 50, false)}}}
	got, err := PodUsage(pod, names, 16384)
	if want := (Usage{MemMiB: 2*16384 + 1000, Cores: 250, Slots: 3, Exclusive: true}); err != nil || got != want {
		t.Fatalf("PodUsage = %+v, %v; want %+v", got, err, want)
	}
	msg := CheckQuota("ai", Quota{Memory: Limit{Set: true, Hard: 3000}}, got, names)
	if !strings.Contains(msg, "a GPU with all its cores (nvidia.com/gpucores 100) counting its whole memory") {
		t.Fatalf("message %q does not say why", msg)
	}
}

func TestCheckQuota(t *testing.T) {
	names := wellknown.DefaultResourceNames()
	ask := Usage{MemMiB: 4000, Cores: 50}
	tests := []struct {
		name string
		q    Quota
		want string
	}{
		{"no quota", Quota{}, ""},
		{"fits exactly", Quota{Memory: Limit{Set: true, Hard: 4000}, Cores: Limit{Set: true, Hard: 150, Used: 100}}, ""},
		{"memory over", Quota{Memory: Limit{Set: true, Hard: 40000, Used: 38000}},
			"namespace ai-team: gpumem quota 40000 MiB, in use 38000, this pod is charged 4000; lower nvidia.com/gpumem or nvidia.com/gpumem-percentage (charged per GPU times nvidia.com/gpu, and at least a slot's share of each GPU: its memory divided by its split) or raise the ResourceQuota"},
		{"cores over", Quota{Cores: Limit{Set: true, Hard: 100, Used: 60}},
			"namespace ai-team: gpucores quota 100, in use 60, this pod is charged 50; lower nvidia.com/gpucores (charged per GPU times nvidia.com/gpu, every core of a GPU held whole, with all its cores or all its memory, and at least a slot's share of each GPU: its cores divided by its split, also for a container that names none) or raise the ResourceQuota"},
		{"unset limit ignores usage", Quota{Memory: Limit{Used: 1 << 40}}, ""},
	}
	for _, tt := range tests {
		if got := CheckQuota("ai-team", tt.q, ask, names); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}
