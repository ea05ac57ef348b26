package nodepods

import (
	corev1 "k8s.io/api/core/v1"
)

// trim is the informer transform of the node's pod cache: it keeps what
// Allocate and inspect read — identity, annotations, the node, container
// names, resources, restart policies (sidecars) and privilege, phase — and drops the
// rest (env, volumes, managed fields, conditions).
func trim(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta, Status: corev1.PodStatus{Phase: p.Status.Phase}}
	out.ManagedFields, out.OwnerReferences = nil, nil
	out.Spec.NodeName = p.Spec.NodeName
	// The runtime hook knows a GPU agent by its ServiceAccount.
	out.Spec.ServiceAccountName = p.Spec.ServiceAccountName
	out.Spec.InitContainers = containers(p.Spec.InitContainers)
	out.Spec.Containers = containers(p.Spec.Containers)
	return out, nil
}

func containers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy}
		// The runtime hook leaves a privileged container's GPUs alone.
		if sc := c.SecurityContext; sc != nil && sc.Privileged != nil {
			out[i].SecurityContext = &corev1.SecurityContext{Privileged: sc.Privileged}
		}
	}
	return out
}
