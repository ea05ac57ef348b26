package webhook

import (
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
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
	v := p.complete(pod)
	pod.Namespace = original.Namespace
	if v.Deny != "" {
		v.Deny = "the Job's pod template would make pods vgpud refuses: " + v.Deny
	}
	return respond(v, podPatch("/spec/template", original, pod), "job "+req.Namespace+"/"+req.Name)
}
