package webhook

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// handleJob completes a Job's pod template as each of its pods will be
// completed at create: a GPU count where only memory or cores are named,
// every core for a whole GPU, requests equal to limits. Kueue admits a
// Job by what its template asks, before any pod exists; without this it
// would count a pod that names only nvidia.com/gpumem as holding no GPU.
// Quota is not checked here: vgpud charges it per pod, at create and at
// bind. A template its pods would be refused for is refused now, with
// the pods' reason.
func (p *Pods) handleJob(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	var job batchv1.Job
	if err := json.Unmarshal(req.Object.Raw, &job); err != nil {
		return errored(http.StatusBadRequest, fmt.Errorf("decode job %s/%s: %w", req.Namespace, req.Name, err))
	}
	t := &job.Spec.Template
	original := &corev1.Pod{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
	pod := original.DeepCopy()
	// The template's pods are created in the Job's namespace.
	pod.Namespace = req.Namespace
	// A tenant's opt-out label on the template is not honoured: it may
	// be taken off a suspended Job's template after Kueue counted the
	// template, and the pods then be completed to more than was counted.
	// Labels are not patched, so a pod that keeps it is skipped as ever.
	delete(pod.Labels, wellknown.LabelWebhook)
	delete(pod.Labels, wellknown.LabelWebhookHAMi)
	v := p.complete(pod)
	pod.Namespace = original.Namespace
	if v.Deny != "" {
		v.Deny = "the Job's pod template would make pods vgpud refuses: " + v.Deny
	}
	if v.Deny == "" && v.Skip == "" && job.Labels[KueueQueueLabel] != "" {
		v.Warnings = append(v.Warnings, p.unseenByKueue(&pod.Spec)...)
	}
	return respond(v, podPatch("/spec/template", original, pod), "job "+req.Namespace+"/"+req.Name)
}

// KueueQueueLabel puts a Job in a Kueue LocalQueue.
const KueueQueueLabel = "kueue.x-k8s.io/queue-name"

// unseenByKueue says what the pods of a completed template will hold that
// the template does not name, so that Kueue's quota, which counts the
// template, cannot count it: each is decided per GPU at placement.
func (p *Pods) unseenByKueue(spec *corev1.PodSpec) []string {
	var out []string
	for c := range podmodel.Containers(spec) {
		r, err := podmodel.ContainerRequestOf(c, p.names)
		if err != nil || r.GPUs == 0 || r.MIGProfile != "" {
			continue
		}
		var unnamed []string
		if r.MemoryPercent > 0 {
			out = append(out, fmt.Sprintf("container %q names its GPU memory as %s, which Kueue counts under that name and not as %s; name %s in MiB to have a %s quota count it (docs/batch.md)",
				c.Name, p.names.GPUMemPercentage, p.names.GPUMem, p.names.GPUMem, p.names.GPUMem))
		} else if r.MemoryMiB == 0 {
			unnamed = append(unnamed, p.names.GPUMem)
		}
		if _, ok := c.Resources.Limits[corev1.ResourceName(p.names.GPUCores)]; !ok {
			unnamed = append(unnamed, p.names.GPUCores)
		}
		if len(unnamed) > 0 {
			out = append(out, fmt.Sprintf("container %q names no %s: each of its pods is given a share of each GPU when it is placed (by the GPU's split, or the whole GPU), which Kueue's quota does not count; name %s in the Job's template to have Kueue count it (docs/batch.md)",
				c.Name, strings.Join(unnamed, " or "), strings.Join(unnamed, " and ")))
		}
	}
	return out
}
