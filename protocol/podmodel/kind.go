package podmodel

import (
	"iter"

	corev1 "k8s.io/api/core/v1"
)

// ContainerKind says when a container holds its GPUs. Kubelet admits init
// containers (sidecars among them) first, in spec order, then the app
// containers.
type ContainerKind uint8

const (
	// KindApp runs beside the other app containers for the pod's life.
	KindApp ContainerKind = iota
	// KindInit runs alone, after the sidecars declared before it have
	// started, and exits before the app containers start.
	KindInit
	// KindSidecar is an init container with restartPolicy Always: it starts
	// in init order and then runs for the pod's life.
	KindSidecar
)

// BeforeApps reports whether kubelet admits the container before the app
// containers (init containers and sidecars).
func (k ContainerKind) BeforeApps() bool { return k != KindApp }

// KindOf classifies one container of spec; init is whether it is listed
// under initContainers.
func KindOf(c *corev1.Container, init bool) ContainerKind {
	switch {
	case !init:
		return KindApp
	case c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways:
		return KindSidecar
	default:
		return KindInit
	}
}

// Containers yields every container of spec with its kind, in the order
// kubelet admits them: init containers first, then app containers.
// Ephemeral containers ask for no resources and are not among them.
func Containers(spec *corev1.PodSpec) iter.Seq2[*corev1.Container, ContainerKind] {
	return func(yield func(*corev1.Container, ContainerKind) bool) {
		for i := range spec.InitContainers {
			if !yield(&spec.InitContainers[i], KindOf(&spec.InitContainers[i], true)) {
				return
			}
		}
		for i := range spec.Containers {
			if !yield(&spec.Containers[i], KindApp) {
				return
			}
		}
	}
}

// Kinds maps each container of spec to its kind.
func Kinds(spec *corev1.PodSpec) map[string]ContainerKind {
	out := make(map[string]ContainerKind, len(spec.InitContainers)+len(spec.Containers))
	for c, k := range Containers(spec) {
		out[c.Name] = k
	}
	return out
}

// Terminated reports whether pod has finished for good. A terminated pod
// holds no GPUs; a pod being deleted still does until it is gone.
func Terminated(pod *corev1.Pod) bool { return TerminatedPhase(pod.Status.Phase) }

// TerminatedPhase is Terminated for a pod known by its phase alone.
func TerminatedPhase(phase corev1.PodPhase) bool {
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}
