package books

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol/dradevices"
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
			return trimClaim(c), nil
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

// trimClaim keeps what quota reads of a claim (quota.ClaimsUsage): each
// request's class, count and capacity, and what vgpud's devices were
// allocated; not its selectors, constraints or config, which a tenant
// may make large.
func trimClaim(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	out := &resourceapi.ResourceClaim{TypeMeta: c.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace, UID: c.UID,
		ResourceVersion: c.ResourceVersion, DeletionTimestamp: c.DeletionTimestamp}}
	for _, r := range c.Spec.Devices.Requests {
		t := resourceapi.DeviceRequest{Name: r.Name}
		if e := r.Exactly; e != nil {
			t.Exactly = &resourceapi.ExactDeviceRequest{DeviceClassName: e.DeviceClassName, AllocationMode: e.AllocationMode, Count: e.Count, Capacity: e.Capacity}
		}
		for _, f := range r.FirstAvailable {
			t.FirstAvailable = append(t.FirstAvailable, resourceapi.DeviceSubRequest{Name: f.Name, DeviceClassName: f.DeviceClassName, AllocationMode: f.AllocationMode, Count: f.Count, Capacity: f.Capacity})
		}
		out.Spec.Devices.Requests = append(out.Spec.Devices.Requests, t)
	}
	if a := c.Status.Allocation; a != nil {
		out.Status.Allocation = &resourceapi.AllocationResult{}
		for _, r := range a.Devices.Results {
			if r.Driver == dradevices.DriverName {
				out.Status.Allocation.Devices.Results = append(out.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
					Request: r.Request, Driver: r.Driver, Pool: r.Pool, Device: r.Device, ConsumedCapacity: r.ConsumedCapacity})
			}
		}
	}
	return out
}
