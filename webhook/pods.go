package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Quotas gives a namespace's vGPU quota and what its pods already use
// (cluster/quota over informers), and the least memory of any GPU the
// leader knows (0: none): the least a GPU held whole is charged at bind.
type Quotas interface {
	NamespaceQuota(namespace string) podmodel.Quota
	SmallestGPUMiB() int64
}

// Handler decides one admission request. The transport (NewHTTPHandler)
// decodes the review and encodes the answer around it.
type Handler interface {
	Handle(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse
}

// Pods is the Handler for pod CREATE, and for Job CREATE (jobs.go).
type Pods struct {
	cfg       Config
	scheduler string // the kube-scheduler profile that calls vgpud's extender
	names     wellknown.ResourceNames
	quotas    Quotas
}

// NewPods returns the pod Handler: GPU pods get scheduler and are read by
// names. quotas may be nil: no quota is checked.
func NewPods(cfg Config, scheduler string, names wellknown.ResourceNames, quotas Quotas) *Pods {
	return &Pods{cfg: cfg, scheduler: scheduler, names: names, quotas: quotas}
}

// Ruling is the outcome of Decide.
type Ruling struct {
	// Deny, when set, is the message the user sees; the pod is refused.
	Deny string
	// Skip, when set, says why the pod is admitted untouched.
	Skip string
	// Warnings reach the pod's author (kubectl prints them) whatever the
	// verdict.
	Warnings []string
}

// Handle decodes the pod, decides, and answers with a patch.
func (p *Pods) Handle(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	isJob := req.Kind.Group == "batch" && req.Kind.Kind == "Job"
	if (!isJob && (req.Kind.Group != "" || req.Kind.Kind != "Pod")) || req.SubResource != "" {
		r := allowed("not a pod or a Job")
		r.Warnings = []string{fmt.Sprintf("vgpud webhook was sent %s %s; it handles only pods and Jobs: check the rules of its MutatingWebhookConfiguration", req.Kind.String(), req.SubResource)}
		return r
	}
	if req.Operation != admissionv1.Create {
		return allowed("only CREATE is mutated")
	}
	if isJob {
		return p.handleJob(req)
	}
	return admitPod(req, p.Decide)
}

// admitPod decodes req's pod, has decide rule on it in place, and
// answers with the patch from the pod as sent.
func admitPod(req *admissionv1.AdmissionRequest, decide func(pod *corev1.Pod) Ruling) *admissionv1.AdmissionResponse {
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return errored(http.StatusBadRequest, fmt.Errorf("decode pod %s/%s: %w", req.Namespace, req.Name, err))
	}
	original := pod.DeepCopy()
	if pod.Namespace == "" {
		// Objects under create may carry no namespace; the request does.
		// Decide needs it for the quota; the patch must not add it.
		pod.Namespace = req.Namespace
	}
	v := decide(&pod)
	pod.Namespace = original.Namespace
	return respond(v, podPatch("", original, &pod), "pod "+req.Namespace+"/"+req.Name)
}

// respond answers ruling v with the patch ops; what names the object in
// an error.
func respond(v Ruling, ops []jsonpatch.Operation, what string) *admissionv1.AdmissionResponse {
	var resp *admissionv1.AdmissionResponse
	switch {
	case v.Deny != "":
		resp = denied(v.Deny)
	case v.Skip != "" && len(ops) == 0:
		resp = allowed(v.Skip)
	default:
		// A skipped pod may still be marked as requiring the hook.
		var err error
		if resp, err = patchResponse(ops); err != nil {
			return errored(http.StatusInternalServerError, fmt.Errorf("%s: %w", what, err))
		}
		if v.Skip != "" {
			resp.Result = allowed(v.Skip).Result
		}
	}
	resp.Warnings = v.Warnings
	return resp
}

// Decide applies the rules to pod in place. It reads pod.Namespace for the
// quota and writes nothing outside pod.
func (p *Pods) Decide(pod *corev1.Pod) Ruling {
	v := p.complete(pod)
	if v.Deny != "" || v.Skip != "" || p.quotas == nil {
		return v
	}
	// After mutation: the GPU count just defaulted counts too.
	ask, err := podmodel.PodUsage(pod, p.names, p.quotas.SmallestGPUMiB())
	if err != nil {
		return Ruling{Deny: err.Error(), Warnings: v.Warnings}
	}
	if msg := podmodel.CheckQuota(pod.Namespace, p.quotas.NamespaceQuota(pod.Namespace), ask, p.names); msg != "" {
		return Ruling{Deny: msg, Warnings: v.Warnings}
	}
	return v
}

// complete checks pod and completes it in place (every rule of Decide but
// the quota): also what a Job's pod template gets, so that whatever counts
// the template before its pods exist counts what they will ask for.
func (p *Pods) complete(pod *corev1.Pod) Ruling {
	names := p.names
	if len(pod.Spec.Containers) == 0 {
		return Ruling{Deny: "pod has no containers; add at least one under spec.containers"}
	}
	p.markHookRequired(pod)
	if l := pod.Labels; l[wellknown.LabelWebhook] == wellknown.WebhookIgnore || l[wellknown.LabelWebhookHAMi] == wellknown.WebhookIgnore {
		return Ruling{Skip: "opted out by label " + wellknown.LabelWebhook + "=" + wellknown.WebhookIgnore}
	}
	if !podmodel.Wants(pod, names) {
		return Ruling{Skip: "asks for no vGPU resources"}
	}
	if s := pod.Spec.SchedulerName; s != "" && s != p.scheduler && s != defaultSchedulerName {
		return Ruling{Skip: "scheduled by " + s}
	}
	if pod.Spec.NodeName != "" {
		return Ruling{Deny: fmt.Sprintf("pod asks for vGPU resources but spec.nodeName is already %q, which skips the scheduler that assigns GPUs; remove spec.nodeName and pin the node with a nodeSelector on kubernetes.io/hostname instead", pod.Spec.NodeName)}
	}

	if _, err := podmodel.SelectorsOf(pod.Annotations); err != nil {
		return Ruling{Deny: err.Error()}
	}
	// A chain the scheduler would refuse is refused now, where the
	// author sees why, rather than left pending. Only the pod's own
	// annotations are judged here: the cluster's default lives with the
	// leader.
	if _, err := podmodel.GPUPolicyOf(pod.Annotations, ""); err != nil {
		return Ruling{Deny: err.Error()}
	}
	warnings := podmodel.Shadowed(pod.Annotations)

	var problems []string
	visit := func(c *corev1.Container) {
		if len(podmodel.VGPUNames(c, names)) == 0 {
			// A privileged container sees every device whatever its env
			// says; it is not ours to judge.
			if p.cfg.VisibleDevicesNone && !privileged(c) {
				setEnv(c, EnvVisibleDevices, VisibleDevicesNone)
			}
			return
		}
		r, bad := checkContainer(c, names)
		if len(bad) > 0 {
			problems = append(problems, bad...)
			return
		}
		p.mutateContainer(c, r)
	}
	for c := range podmodel.Containers(&pod.Spec) {
		visit(c)
	}
	if len(problems) > 0 {
		return Ruling{Deny: strings.Join(problems, "; "), Warnings: warnings}
	}

	// After mutation, like the scheduler: a defaulted GPU count counts.
	cs, err := podmodel.Requests(pod, names)
	var mode podmodel.GPUMode
	if err == nil {
		mode, err = podmodel.ModeOf(pod.Annotations, cs)
	}
	if err == nil {
		err = podmodel.CheckMode(mode, cs)
	}
	if err != nil {
		return Ruling{Deny: err.Error(), Warnings: warnings}
	}

	pod.Spec.SchedulerName = p.scheduler
	if p.cfg.RuntimeClass != "" && pod.Spec.RuntimeClassName == nil {
		rc := p.cfg.RuntimeClass
		pod.Spec.RuntimeClassName = &rc
	}
	return Ruling{Warnings: warnings}
}
