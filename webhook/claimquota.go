package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// ClaimQuotas admits DRA claims against their namespace's vGPU quota
// (cluster/quota): AdmitClaim charges ask (where record: not on a dry
// run) unless refuse, given the namespace's quota and use, says why not,
// serialised per namespace with bind.
type ClaimQuotas interface {
	ClaimClass() string
	SmallestGPUMiB() int64
	AdmitClaim(ctx context.Context, namespace, name, generateName string, ask podmodel.Usage, record bool, refuse func(podmodel.Quota) string) string
}

// ResourceClaims is the Handler for ResourceClaim CREATE: a claim that
// asks vgpud's DeviceClass is charged to its namespace's vGPU quota
// (requests.nvidia.com/gpumem and gpucores) as a container asking the
// same would be, and refused past it, whoever creates it (a tenant, or
// kube-controller-manager from a template).
type ResourceClaims struct {
	quotas ClaimQuotas
}

// NewResourceClaims checks claims against quotas.
func NewResourceClaims(quotas ClaimQuotas) *ResourceClaims { return &ResourceClaims{quotas: quotas} }

// Handle decodes the claim and admits or refuses it; it never patches.
func (h *ResourceClaims) Handle(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Kind.Group != resourceapi.GroupName || req.Kind.Kind != "ResourceClaim" || req.SubResource != "" || req.Operation != admissionv1.Create {
		return allowed("only ResourceClaim CREATE is checked")
	}
	var claim resourceapi.ResourceClaim
	if err := json.Unmarshal(req.Object.Raw, &claim); err != nil {
		return errored(http.StatusBadRequest, fmt.Errorf("decode claim %s/%s: %w", req.Namespace, req.Name, err))
	}
	class := h.quotas.ClaimClass()
	if class == "" {
		return allowed("claims are not counted")
	}
	asks, err := dradevices.ClaimRequests(&claim.Spec, class)
	if err == nil && len(asks) == 0 {
		return allowed("asks no " + class + " device")
	}
	var ask podmodel.Usage
	if err == nil {
		ask = podmodel.Requested(asks, h.quotas.SmallestGPUMiB(), false)
	}
	// A dry run is answered as the create would be, and charges nothing.
	record := req.DryRun == nil || !*req.DryRun
	msg := h.quotas.AdmitClaim(ctx, req.Namespace, claim.Name, claim.GenerateName, ask, record, func(q podmodel.Quota) string {
		switch {
		case !q.Memory.Set && !q.Cores.Set:
			return ""
		case err != nil:
			return fmt.Sprintf("namespace %s has a vGPU quota: %v", req.Namespace, err)
		}
		return claimOverQuota(req.Namespace, q, ask)
	})
	if msg != "" {
		return denied(msg)
	}
	return allowed("within the namespace's vGPU quota")
}

// claimOverQuota says which limit ask passes and what to change, or "".
func claimOverQuota(namespace string, q podmodel.Quota, ask podmodel.Usage) string {
	if q.Memory.Set && ask.MemMiB > 0 && q.Memory.Used+ask.MemMiB > q.Memory.Hard {
		return fmt.Sprintf("namespace %s: gpumem quota %d MiB, in use %d by its pods and claims, this claim is charged %d (its memory times its count; one that names no memory, or asks every core, a whole GPU's); ask less %s or raise the ResourceQuota",
			namespace, q.Memory.Hard, q.Memory.Used, ask.MemMiB, dradevices.CapacityMemory)
	}
	if cores := int64(ask.Cores); q.Cores.Set && cores > 0 && q.Cores.Used+cores > q.Cores.Hard {
		return fmt.Sprintf("namespace %s: gpucores quota %d, in use %d by its pods and claims, this claim is charged %d (its cores times its count); ask fewer %s or raise the ResourceQuota",
			namespace, q.Cores.Hard, q.Cores.Used, cores, dradevices.CapacityCores)
	}
	return ""
}
