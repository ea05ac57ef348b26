package books

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Transform is the leader's informer transform: pods become slimpod.Pod
// records, and nodes keep only their metadata and allocatable, so the
// leader holds tens of thousands of pods without their specs, labels,
// other annotations, managed fields and conditions. Set it on the
// informers (SetTransform); read pods through slimpod.Store.
func Transform(names wellknown.ResourceNames) toolscache.TransformFunc {
	pod := slimpod.Transform(names)
	return func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Node); ok {
			return trimNode(n), nil
		}
		if c, ok := obj.(*resourceapi.ResourceClaim); ok {
			// Quota reads the requests alone.
			return &resourceapi.ResourceClaim{TypeMeta: c.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace, UID: c.UID,
				ResourceVersion: c.ResourceVersion, DeletionTimestamp: c.DeletionTimestamp}, Spec: c.Spec}, nil
		}
		return pod(obj)
	}
}

func trimNode(o *corev1.Node) *corev1.Node {
	return &corev1.Node{
		TypeMeta:   o.TypeMeta,
		ObjectMeta: metaOnly(o.ObjectMeta),
		// What the leader's own preemption checks as kube-scheduler does.
		Spec:   corev1.NodeSpec{Taints: o.Spec.Taints, Unschedulable: o.Spec.Unschedulable},
		Status: corev1.NodeStatus{Allocatable: o.Status.Allocatable, Capacity: o.Status.Capacity},
	}
}

func metaOnly(m metav1.ObjectMeta) metav1.ObjectMeta {
	m.ManagedFields = nil
	m.OwnerReferences = nil
	return m
}
