//go:build bench

package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// draRun publishes every node's GPUs as a node serving DRA claims would
// (one ResourceSlice per node, from its inventory), makes the DeviceClass
// and one ResourceClaim per pod asking what the pipeline's GPU pods ask
// (2000 MiB, 5 cores), then has run schedule n pods that each name one,
// through kube-scheduler's default profile: no extender.
func (e env) draRun(t *testing.T, ctx context.Context, n int, run func(ns string, n int, mk func(i int) *corev1.Pod) pipelineRun) pipelineRun {
	const ns = "dra"
	start := time.Now()
	nodes, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var withGPUs []corev1.Node
	for _, nd := range nodes.Items {
		if nd.Annotations[wellknown.AnnotationGPUs] != "" {
			withGPUs = append(withGPUs, nd)
		}
	}
	harness.Parallel(t, len(withGPUs), 32, func(i int) error {
		nd := withGPUs[i]
		inv, err := protocol.DecodeInventory(nd.Annotations[wellknown.AnnotationGPUs])
		if err != nil {
			return err
		}
		_, err = e.kube.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "bench-" + nd.Name},
			Spec: resourceapi.ResourceSliceSpec{Driver: dradevices.DriverName, NodeName: &nd.Name,
				Pool:    resourceapi.ResourcePool{Name: nd.Name, ResourceSliceCount: 1},
				Devices: dradevices.Devices(inv, dradevices.ClaimDefaults{MemPercent: 100}, nil)},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "vgpud-gpu"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].type == %q", dradevices.DriverName, dradevices.DriverName, dradevices.TypeGPU)}}}}}
	if _, err := e.kube.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	harness.EnsureNamespace(t, e.kube, ns, nil)
	harness.Parallel(t, n, 32, func(i int) error {
		_, err := e.kube.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("d%05d", i)},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: class.Name,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
					dradevices.CapacityMemory: resource.MustParse("2000Mi"), dradevices.CapacityCores: resource.MustParse("5")}},
			}}}}}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	// The leader idle first: the deletion of the extender's pods just
	// before is not this run's CPU.
	e.waitLeaderIdle(t, 60*time.Second, "before the DRA run")
	t.Logf("dra: %d nodes' ResourceSlices and %d claims made in %v", len(withGPUs), n, time.Since(start).Round(time.Millisecond))
	return run(ns, n, func(i int) *corev1.Pod {
		name := fmt.Sprintf("d%05d", i)
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &name}},
			Containers: []corev1.Container{{Name: "main", Image: "busybox",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}}}
	})
}
