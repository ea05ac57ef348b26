package cache

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Trim is an informer transform that keeps only what the leader reads —
// names, vgpud's annotations, container resources, phase, allocatable — so
// the leader holds tens of thousands of pods without their env, volumes,
// labels, other annotations (kubectl's last-applied-configuration alone
// can be kilobytes), managed fields and conditions. Pass it with
// informers.WithTransform.
func Trim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		p := &corev1.Pod{
			TypeMeta:   o.TypeMeta,
			ObjectMeta: podMeta(o.ObjectMeta),
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

// leaderReads says whether the leader reads a pod annotation: vgpud's
// own, and the NVIDIA and HAMi selectors and policies it honours
// (protocol/names.go).
func leaderReads(key string) bool {
	return strings.HasPrefix(key, "vgpud.io/") || strings.HasPrefix(key, "nvidia.com/") || strings.HasPrefix(key, "hami.io/")
}

// podMeta is metaOnly without labels, and with only the annotations the
// leader reads.
func podMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	m = metaOnly(m)
	m.Labels = nil
	var keep map[string]string
	for k, v := range m.Annotations {
		if leaderReads(k) {
			if keep == nil {
				keep = make(map[string]string, 2)
			}
			keep[k] = v
		}
	}
	m.Annotations = keep
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
