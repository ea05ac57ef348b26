package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// claimQuotas is one namespace's quota, charging what it admits.
type claimQuotas struct {
	q        podmodel.Quota
	admitted []string
}

func (c *claimQuotas) ClaimClass() string    { return "vgpud-gpu" }
func (c *claimQuotas) SmallestGPUMiB() int64 { return 40960 }
func (c *claimQuotas) AdmitClaim(_ context.Context, _, name, generateName string, ask podmodel.Usage, record bool, refuse func(podmodel.Quota) string) string {
	if msg := refuse(c.q); msg != "" || !record {
		return msg
	}
	c.q.Memory.Used += ask.MemMiB
	c.q.Cores.Used += int64(ask.Cores)
	c.admitted = append(c.admitted, name+generateName)
	return ""
}

func claimRequest(t *testing.T, class string, mem string, mode resourceapi.DeviceAllocationMode) *admissionv1.AdmissionRequest {
	t.Helper()
	r := &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: mode, Count: 1}
	if mem != "" {
		r.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{dradevices.CapacityMemory: resource.MustParse(mem)}}
	}
	claim := resourceapi.ResourceClaim{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"}, ObjectMeta: metav1.ObjectMeta{GenerateName: "train-gpu-", Namespace: "ml"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: r}}}}}
	raw, err := json.Marshal(claim)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{UID: "1", Kind: metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaim"}, Namespace: "ml",
		Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}
}

// A claim of vgpud's class is charged to the namespace's vGPU quota and
// refused past it, saying by how much; other classes and namespaces
// without a quota are left alone, and a claim quota cannot count is
// refused only where a quota is set.
func TestResourceClaimsChargeQuota(t *testing.T) {
	cq := &claimQuotas{q: podmodel.Quota{Memory: podmodel.Limit{Set: true, Hard: 10000, Used: 4000}}}
	h := NewResourceClaims(cq)
	ctx := context.Background()
	if resp := h.Handle(ctx, claimRequest(t, "vgpud-gpu", "4000Mi", resourceapi.DeviceAllocationModeExactCount)); !resp.Allowed || len(resp.Patch) != 0 {
		t.Fatalf("4000 of the 6000 left: %v", resp.Result)
	}
	resp := h.Handle(ctx, claimRequest(t, "vgpud-gpu", "4000Mi", resourceapi.DeviceAllocationModeExactCount))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "gpumem quota 10000 MiB, in use 8000 by its pods and claims, this claim is charged 4000") {
		t.Fatalf("4000 of the 2000 left: %v", resp.Result)
	}
	// Naming no memory, it may get a whole GPU's.
	if resp := h.Handle(ctx, claimRequest(t, "vgpud-gpu", "", resourceapi.DeviceAllocationModeExactCount)); resp.Allowed || !strings.Contains(resp.Result.Message, "charged 40960") {
		t.Fatalf("no memory named: %v", resp.Result)
	}
	if resp := h.Handle(ctx, claimRequest(t, "vgpud-gpu", "", resourceapi.DeviceAllocationModeAll)); resp.Allowed || !strings.Contains(resp.Result.Message, "ask a count") {
		t.Fatalf("allocationMode All under a quota: %v", resp.Result)
	}
	if resp := h.Handle(ctx, claimRequest(t, "someone-elses", "100Gi", resourceapi.DeviceAllocationModeExactCount)); !resp.Allowed {
		t.Fatalf("another class: %v", resp.Result)
	}
	if len(cq.admitted) != 1 || cq.admitted[0] != "train-gpu-" {
		t.Fatalf("admitted %v; want the first, by its generateName", cq.admitted)
	}
	free := NewResourceClaims(&claimQuotas{})
	if resp := free.Handle(ctx, claimRequest(t, "vgpud-gpu", "", resourceapi.DeviceAllocationModeAll)); !resp.Allowed {
		t.Fatalf("no quota: %v", resp.Result)
	}
}
