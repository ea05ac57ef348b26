package cache

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Trim is an informer transform that keeps only what the leader reads —
// names, labels, annotations, container resources, phase, allocatable — so
// the leader holds tens of thousands of pods without their env, volumes,
// managed fields and conditions. Pass it with informers.WithTransform.
func Trim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		p := &corev1.Pod{
			TypeMeta:   o.TypeMeta,
			ObjectMeta: metaOnly(o.ObjectMeta),
			Spec: corev1.PodSpec{
				NodeName:       o.Spec.NodeName,
				SchedulerName:  o.Spec.SchedulerName,
				InitContainers: trimContainers(o.Spec.InitContainers),
				Containers:     trimContainers(o.Spec.Containers),
			},
			Status: corev1.PodStatus{Phase: o.Status.Phase},
		}
		return p, nil
	case *corev1.Node:
		return &corev1.Node{
			TypeMeta:   o.TypeMeta,
			ObjectMeta: metaOnly(o.ObjectMeta),
			Status:     corev1.NodeStatus{Allocatable: o.Status.Allocatable, Capacity: o.Status.Capacity},
		}, nil
	}
	return obj, nil
}

func metaOnly(m metav1.ObjectMeta) metav1.ObjectMeta {
	m.ManagedFields = nil
	m.OwnerReferences = nil
	return m
}

func trimContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy, SecurityContext: c.SecurityContext}
	}
	return out
}
