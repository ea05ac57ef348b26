package webhook

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// markHookRequired makes the runtime require vgpud's hook for pod's
// containers when pod could reach a GPU (podmodel.ReachesGPU), outside
// the namespaces that start before the hook, so that while vgpud is
// down only such pods wait. Where the apiserver serves
// MutatingAdmissionPolicy the vgpud-hook-required policy has set it
// already; before 1.36 this is what sets it. A scoped key a pod set
// itself that leaves vgpud out is not overwritten: the
// vgpud-runtime-hook-required policy refuses the pod and says why.
func (p *Pods) markHookRequired(pod *corev1.Pod) {
	if slices.Contains(p.cfg.HookOptionalNamespaces, pod.Namespace) || !podmodel.ReachesGPU(pod, p.names) ||
		podmodel.ListsVgpud(pod.Annotations[wellknown.AnnotationRequiredPlugins]) {
		return
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[wellknown.AnnotationRequiredPlugins] = wellknown.RequiredPluginsVgpud
}
