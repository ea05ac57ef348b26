//go:build bench

package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/vgpud/vgpud/manifests"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// draRuns are the DRA side of the pipeline: how a claim pod is made.
type draRuns struct {
	claims, templates, converted pipelineRun
}

// runFunc is the pipeline's run: n pods of mk in ns, through cfg's
// kube-scheduler, with also's processes started beside it.
type runFunc func(ns string, n int, mk func(i int) *corev1.Pod, also func() (map[string]int, func())) pipelineRun

// draRun publishes every node's GPUs as a node serving DRA claims would
// (one ResourceSlice per node, from its inventory), makes the DeviceClass,
// and schedules n pods asking what the pipeline's GPU pods ask (2000 MiB,
// 5 cores) through kube-scheduler's default profile, no extender, three
// ways: each naming a ResourceClaim made beforehand; each naming one
// ResourceClaimTemplate, kube-controller-manager's claim controller
// making the claims; and written for vgpud (nvidia.com/gpumem and
// gpucores) in a namespace labelled vgpud.io/gpu-claims=true, which
// vgpud's webhook converts at create. Each run's claims are deleted
// before the next, so each finds the GPUs empty.
func (e env) draRun(t *testing.T, ctx context.Context, n int, run runFunc) draRuns {
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
				Devices: dradevices.Devices(inv, dradevices.ClaimDefaults{MemPercent: 100}, dradevices.Marks{})},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: wellknown.DRAClassGPU}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].type == %q", dradevices.DriverName, dradevices.DriverName, dradevices.TypeGPU)}}}}}
	if _, err := e.kube.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class.Name,
		Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			dradevices.CapacityMemory: resource.MustParse("2000Mi"), dradevices.CapacityCores: resource.MustParse("5")}},
	}}}}}
	claimPod := func(name string, claim corev1.PodResourceClaim) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{claim},
			Containers: []corev1.Container{{Name: "main", Image: "busybox",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: claim.Name}}}}}}}
	}
	var out draRuns

	// Claims made beforehand.
	const ns = "dra"
	harness.EnsureNamespace(t, e.kube, ns, nil)
	harness.Parallel(t, n, 32, func(i int) error {
		_, err := e.kube.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("d%05d", i)}, Spec: spec}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	// The leader idle first: the deletion of the extender's pods just
	// before is not this run's CPU.
	e.waitLeaderIdle(t, 60*time.Second, "before the DRA run")
	t.Logf("dra: %d nodes' ResourceSlices and %d claims made in %v", len(withGPUs), n, time.Since(start).Round(time.Millisecond))
	out.claims = run(ns, n, func(i int) *corev1.Pod {
		name := fmt.Sprintf("d%05d", i)
		return claimPod(name, corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: &name})
	}, nil)
	e.clearPods(t, ctx, ns)
	e.clearClaims(t, ctx, ns)

	// From a template, by kube-controller-manager's claim controller,
	// started with kube-scheduler: making the claims is the run's work.
	const tns = "dra-template"
	harness.EnsureNamespace(t, e.kube, tns, nil)
	if _, err := e.kube.ResourceV1().ResourceClaimTemplates(tns).Create(ctx, &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "slice"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	e.waitLeaderIdle(t, 60*time.Second, "before the DRA template run")
	out.templates = run(tns, n, func(i int) *corev1.Pod {
		return claimPod(fmt.Sprintf("t%05d", i), corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("slice")})
	}, e.claimController(t))
	e.clearPods(t, ctx, tns)
	e.clearClaims(t, ctx, tns)

	// Written for vgpud, converted by its webhook at create (the
	// template made by the first pod, read by every other), then as from
	// a template; the claims' quota check (resourceclaims.vgpud.io) is
	// called for each claim kube-controller-manager makes.
	const cns = "dra-converted"
	harness.EnsureNamespace(t, e.kube, cns, map[string]string{wellknown.LabelGPUClaims: "true"})
	stop := e.claimWebhooks(t, ctx)
	defer stop()
	e.waitLeaderIdle(t, 60*time.Second, "before the DRA conversion run")
	out.converted = run(cns, n, func(i int) *corev1.Pod {
		p := gpuPodSpec(fmt.Sprintf("v%05d", i))
		p.Spec.SchedulerName = ""
		p.Spec.Containers[0].Resources.Limits["nvidia.com/gpumem"] = resource.MustParse("2000")
		p.Spec.Containers[0].Resources.Limits["nvidia.com/gpucores"] = resource.MustParse("5")
		return p
	}, e.claimController(t))
	got, err := e.kube.CoreV1().Pods(cns).Get(ctx, "v00000", metav1.GetOptions{})
	if err != nil || len(got.Spec.ResourceClaims) != 1 || got.Spec.ResourceClaims[0].ResourceClaimTemplateName == nil {
		t.Fatalf("the conversion run's pods were not converted: %+v, %v", got.Spec.ResourceClaims, err)
	}
	e.clearPods(t, ctx, cns)
	e.clearClaims(t, ctx, cns)
	return out
}

// claimController starts kube-controller-manager with its resource claim
// controller alone, when called; the returned pids are measured.
func (e env) claimController(t *testing.T) func() (map[string]int, func()) {
	return func() (map[string]int, func()) {
		p := harness.Spawn(t, "kube-controller-manager", filepath.Join(e.k8sBin, "kube-controller-manager"), "--kubeconfig="+e.kubeconfig,
			"--controllers=resourceclaim-controller", "--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false",
			"--kube-api-qps=1000", "--kube-api-burst=2000", "--v=0")
		return map[string]int{"kube-controller-manager": p.Cmd.Process.Pid}, func() { p.Stop(t) }
	}
}

// claimWebhooks registers vgpud's conversion and claim quota webhooks,
// by URL (no kube-proxy here), and returns their removal.
func (e env) claimWebhooks(t *testing.T, ctx context.Context) func() {
	mwc, err := manifests.WebhookConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	ca := e.servingCA(t, ctx)
	mwc.Name = "vgpud-bench-claims"
	mwc.Webhooks = slices.DeleteFunc(mwc.Webhooks, func(w admissionregistrationv1.MutatingWebhook) bool {
		return w.Name != "claims.vgpud.io" && w.Name != "resourceclaims.vgpud.io"
	})
	for i := range mwc.Webhooks {
		byURL(&mwc.Webhooks[i], ca)
	}
	if len(mwc.Webhooks) != 2 {
		t.Fatalf("the manifest's claim webhooks: %d", len(mwc.Webhooks))
	}
	if _, err := e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.EnsureNamespace(t, e.kube, "dra-probe", map[string]string{wellknown.LabelGPUClaims: "true"})
	harness.Eventually(t, 30*time.Second, "the conversion webhook answering", func() error {
		p := gpuPodSpec(fmt.Sprintf("probe-%d", time.Now().UnixNano()))
		p.Spec.SchedulerName = ""
		got, err := e.kube.CoreV1().Pods("dra-probe").Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if len(got.Spec.ResourceClaims) == 0 {
			return fmt.Errorf("not converted yet")
		}
		return nil
	})
	return func() {
		_ = e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), mwc.Name, metav1.DeleteOptions{})
	}
}

// clearClaims deletes ns's claims, which hold their shares until then.
// kube-scheduler gave each allocated one a finalizer, which
// kube-controller-manager's claim controller takes off once its pods are
// gone; it runs only in a run's window here, so the bench takes it off.
func (e env) clearClaims(t *testing.T, ctx context.Context, ns string) {
	if err := e.kube.ResourceV1().ResourceClaims(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete the %s claims: %v", ns, err)
	}
	list, err := e.kube.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	harness.Parallel(t, len(list.Items), 32, func(i int) error {
		_, err := e.kube.ResourceV1().ResourceClaims(ns).Patch(ctx, list.Items[i].Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	harness.Eventually(t, 2*time.Minute, "the "+ns+" claims deleted", func() error {
		list, err := e.kube.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%s claims remain", ns)
		}
		return nil
	})
}
