package harness

import corev1 "k8s.io/api/core/v1"

// Unschedulable is why kube-scheduler found p unschedulable, as its
// PodScheduled condition says; ok is false while it says nothing of it.
func Unschedulable(p *corev1.Pod) (why string, ok bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message, true
		}
	}
	return "", false
}
