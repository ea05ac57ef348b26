package webhook

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vgpud/vgpud/protocol"
)

func TestSetEnvReplacesInPlace(t *testing.T) {
	c := corev1.Container{Env: []corev1.EnvVar{
		{Name: "A", Value: "1"},
		{Name: EnvTaskPriority, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	}}
	setEnv(&c, EnvTaskPriority, "1")
	setEnv(&c, "B", "2")
	want := []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: EnvTaskPriority, Value: "1"}, {Name: "B", Value: "2"}}
	if !reflect.DeepEqual(c.Env, want) {
		t.Fatalf("env %+v, want %+v", c.Env, want)
	}
}

func TestVGPUNamesIgnoresPriorityAlone(t *testing.T) {
	names := protocol.DefaultResourceNames()
	c := corev1.Container{Resources: corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceName(names.Priority): resource.MustParse("1")},
		Requests: corev1.ResourceList{corev1.ResourceName(names.GPUCores): resource.MustParse("10")},
	}}
	if got := vgpuNames(&c, names); !reflect.DeepEqual(got, []string{names.GPUCores}) {
		t.Fatalf("vgpuNames = %v", got)
	}
}
