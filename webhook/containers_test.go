package webhook

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
