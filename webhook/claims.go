package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// ClaimTemplates makes the ResourceClaimTemplates converted pods name.
// Ensure returns nil once namespace holds t as given (made now, or
// before), and an error that says what to change where a template of
// that name holds anything else.
type ClaimTemplates interface {
	Ensure(ctx context.Context, namespace string, t *resourceapi.ResourceClaimTemplate) error
}

// ClaimPods is the Handler for pods of the namespaces an administrator
// labelled vgpud.io/gpu-claims=true (the webhook configuration's
// namespaceSelector sends them here). Each is checked and completed as
// Pods does, quota included; then each container's vGPU resources become
// a DRA claim, made by kube-controller-manager from a template of the
// container's shape, which kube-scheduler places on nodes that serve
// claims. Converting fixes the pod's mode before any node is chosen: it
// never lands on an extender node.
type ClaimPods struct {
	pods      *Pods
	templates ClaimTemplates
}

// NewClaimPods converts what p admits; templates makes the templates.
func NewClaimPods(p *Pods, templates ClaimTemplates) *ClaimPods {
	return &ClaimPods{pods: p, templates: templates}
}

// Handle decides, makes the templates the pod names (not on a dry run:
// the webhook's sideEffects are NoneOnDryRun), and answers with a patch.
func (c *ClaimPods) Handle(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.SubResource != "" || req.Operation != admissionv1.Create {
		return c.pods.Handle(ctx, req)
	}
	return admitPod(req, func(pod *corev1.Pod) Ruling {
		v, templates := c.Decide(pod)
		if v.Deny != "" || (req.DryRun != nil && *req.DryRun) {
			return v
		}
		for _, t := range templates {
			if err := c.templates.Ensure(ctx, req.Namespace, t); err != nil {
				return Ruling{Deny: "vgpud could not make the claim template for this pod's GPU request: " + err.Error(), Warnings: v.Warnings}
			}
		}
		return v
	})
}

// Decide is Pods.Decide, then the conversion: pod in place, and the
// templates it names.
func (c *ClaimPods) Decide(pod *corev1.Pod) (Ruling, []*resourceapi.ResourceClaimTemplate) {
	v := c.pods.Decide(pod)
	if v.Deny != "" || v.Skip != "" {
		return v, nil
	}
	templates, err := toClaims(pod, c.pods.names, c.pods.cfg.ClaimDeviceClass)
	if err != nil {
		return Ruling{Deny: err.Error(), Warnings: v.Warnings}, nil
	}
	for _, k := range []string{wellknown.AnnotationGPUPolicy, wellknown.AnnotationGPUPolicyHAMi, wellknown.AnnotationNodePolicy, wellknown.AnnotationNodePolicyHAMi} {
		if _, ok := pod.Annotations[k]; ok {
			v.Warnings = append(v.Warnings, fmt.Sprintf("annotation %s is not read for a pod whose GPUs are DRA claims: kube-scheduler takes the first GPU that fits (docs/dra.md)", k))
		}
	}
	return v, templates
}

// toClaims turns each container's vGPU resources into a pod resource
// claim from a template of its shape: the same memory and cores, its
// GPU count kept apart on distinct GPUs, numa-bind as one NUMA node, the
// GPU type and UUID annotations as selectors. Each container gets a
// claim of its own, as it asked a slice of its own. pod must have
// passed Pods.Decide.
func toClaims(pod *corev1.Pod, names wellknown.ResourceNames, class string) ([]*resourceapi.ResourceClaimTemplate, error) {
	if mode, err := podmodel.GPUModeOf(pod.Annotations); err == nil && mode == podmodel.ModeMIG {
		return nil, fmt.Errorf("this namespace's GPU pods are DRA claims (label %s), and MIG instances are asked by a claim of DeviceClass %s: write that claim instead of the gpu-mode annotation", wellknown.LabelGPUClaims, wellknown.DRAClassMIG)
	}
	sel, err := podmodel.SelectorsOf(pod.Annotations)
	if err != nil {
		return nil, err
	}
	numa := pod.Annotations[wellknown.AnnotationNUMABind] == "true"
	// Names a container may already refer to are not given out: a
	// reference to a name no claim had would join the claim made for it.
	taken := map[string]bool{}
	for _, rc := range pod.Spec.ResourceClaims {
		taken[rc.Name] = true
	}
	for c := range podmodel.Containers(&pod.Spec) {
		for _, rc := range c.Resources.Claims {
			taken[rc.Name] = true
		}
	}
	var out []*resourceapi.ResourceClaimTemplate
	seen := map[string]bool{}
	i := 0
	for c := range podmodel.Containers(&pod.Spec) {
		r, err := podmodel.ContainerRequestOf(c, names)
		if err != nil {
			return nil, err
		}
		if !r.Wants() {
			continue
		}
		switch {
		case r.MIGProfile != "":
			return nil, fmt.Errorf("container %q asks for a MIG instance by its resource, which has no claim form here: ask a claim of DeviceClass %s with a selector on its profile", c.Name, wellknown.DRAClassMIG)
		case r.MemoryPercent != 0:
			return nil, fmt.Errorf("container %q asks %s, a share of whichever GPU it gets, which a claim cannot ask: write %s in MiB, or leave both out for the cluster's default", c.Name, names.GPUMemPercentage, names.GPUMem)
		case r.HasPriority:
			return nil, fmt.Errorf("container %q asks %s, which a DRA claim does not carry yet: drop it", c.Name, names.Priority)
		}
		stripVGPU(c, names)
		if r.GPUs == 0 {
			continue
		}
		t := claimTemplate(class, r, sel, numa)
		for _, sel := range t.Spec.Spec.Devices.Requests[0].Exactly.Selectors {
			if n := len(sel.CEL.Expression); n > resourceapi.CELSelectorExpressionMaxLength {
				return nil, fmt.Errorf("the GPU type and UUID annotations make a claim selector of %d bytes, more than a claim takes (%d): name fewer types or UUIDs", n, resourceapi.CELSelectorExpressionMaxLength)
			}
		}
		name := ""
		for ; name == "" || taken[name]; i++ {
			name = "vgpud-gpu-" + strconv.Itoa(i)
		}
		taken[name] = true
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: &t.Name})
		c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: name})
		if !seen[t.Name] {
			seen[t.Name] = true
			out = append(out, t)
		}
	}
	// kube-scheduler's default profile places claims; the extender's
	// would refuse a pod that asks no vGPU resource.
	pod.Spec.SchedulerName = defaultSchedulerName
	return out, nil
}

// stripVGPU removes the vGPU resources from c's limits and requests.
func stripVGPU(c *corev1.Container, names wellknown.ResourceNames) {
	for _, n := range names.All() {
		delete(c.Resources.Limits, corev1.ResourceName(n))
		delete(c.Resources.Requests, corev1.ResourceName(n))
	}
}

// claimTemplate is the template of a container's request, named by a
// hash of its spec: pods of one shape share one.
func claimTemplate(class string, r podmodel.ContainerRequest, sel podmodel.Selectors, numa bool) *resourceapi.ResourceClaimTemplate {
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(r.GPUs)}
	caps := map[resourceapi.QualifiedName]resource.Quantity{}
	if r.MemoryMiB > 0 {
		caps[dradevices.CapacityMemory] = *resource.NewQuantity(r.MemoryMiB<<20, resource.BinarySI)
	}
	if r.Cores > 0 {
		caps[dradevices.CapacityCores] = *resource.NewQuantity(int64(r.Cores), resource.DecimalSI)
	}
	if len(caps) > 0 {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: caps}
	}
	req.Selectors = celSelectors(sel)
	spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: req}}}}
	if r.GPUs > 1 {
		// One shared GPU could be taken twice; the runtime hook would
		// refuse that container.
		spec.Devices.Constraints = append(spec.Devices.Constraints, resourceapi.DeviceConstraint{DistinctAttribute: attribute(dradevices.AttrUUID)})
		if numa {
			spec.Devices.Constraints = append(spec.Devices.Constraints, resourceapi.DeviceConstraint{MatchAttribute: attribute(dradevices.AttrNUMANode)})
		}
	}
	b, _ := json.Marshal(spec) // a spec of plain fields marshals
	h := fnv.New64a()
	h.Write(b)
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s%016x", wellknown.ClaimTemplatePrefix, h.Sum64()), Labels: map[string]string{wellknown.LabelManagedBy: wellknown.ManagedByVgpud}},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: spec},
	}
}

func attribute(name string) *resourceapi.FullyQualifiedName {
	n := resourceapi.FullyQualifiedName(wellknown.DRADriver + "/" + name)
	return &n
}

// celSelectors are sel's rules as the extender applies them (fit): the
// model contains one of the types, case aside; the UUID is one of those
// named; neither is one of those refused.
func celSelectors(sel podmodel.Selectors) []resourceapi.DeviceSelector {
	attr := func(name string) string {
		return fmt.Sprintf("device.attributes[%q].%s.lowerAscii()", wellknown.DRADriver, name)
	}
	oneOf := func(list []string, f func(lit string) string) string {
		var terms []string
		for _, v := range list {
			if v = strings.TrimSpace(v); v != "" {
				terms = append(terms, f(strconv.Quote(lowerASCII(v))))
			}
		}
		return strings.Join(terms, " || ")
	}
	model := func(lit string) string { return attr(dradevices.AttrProductName) + ".contains(" + lit + ")" }
	uuid := func(lit string) string { return attr(dradevices.AttrUUID) + " == " + lit }
	var out []resourceapi.DeviceSelector
	add := func(expr string, negate bool) {
		if expr == "" {
			return
		}
		if negate {
			expr = "!(" + expr + ")"
		}
		out = append(out, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}})
	}
	add(oneOf(sel.UseTypes, model), false)
	add(oneOf(sel.NoUseTypes, model), true)
	add(oneOf(sel.UseUUIDs, uuid), false)
	add(oneOf(sel.NoUseUUIDs, uuid), true)
	return out
}

// lowerASCII lowers ASCII letters alone, as CEL's lowerAscii() does the
// attribute it is compared with.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
