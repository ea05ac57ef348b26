package podmodel

import (
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// A RuntimeClass whose name starts with NVIDIARuntimeClassPrefix hands a
// container the GPUs its env names: the GPU Operator's nvidia,
// nvidia-cdi and nvidia-legacy, k3s's nvidia-experimental.
const NVIDIARuntimeClassPrefix = "nvidia"

// Prefixes of what else hands a container devices: CDI annotations,
// which the NVIDIA toolkit's NRI plugin (nvidia.cdi.k8s.io/) and
// runtimes (cdi.k8s.io/) inject, and DRA's extended resources backed by
// a device class (KEP-5004), which the scheduler turns into a claim.
const (
	cdiAnnotationPrefix    = "cdi.k8s.io/"
	nvidiaCDIAnnotation    = "nvidia.cdi.k8s.io/"
	deviceClassResourceDom = "deviceclass.resource.kubernetes.io/"
)

// ReachesGPU reports whether pod could reach a GPU by any way a runtime
// gives one, so that the runtime must not create its containers without
// vgpud's hook: a GPU resource (vGPU, per-profile MIG, any of the GPU
// domain's, or a DRA device class's), an NVIDIA runtime class, a
// privileged container, a host path of /dev, a resource claim (DRA
// hands devices through CDI), or a CDI annotation. The manifest's
// policies and webhook configuration say the same in CEL
// (webhook/hook_test.go and manifest_test.go hold them equal).
func ReachesGPU(pod *corev1.Pod, names wellknown.ResourceNames) bool {
	if strings.HasPrefix(stringOr(pod.Spec.RuntimeClassName), NVIDIARuntimeClassPrefix) || len(pod.Spec.ResourceClaims) > 0 {
		return true
	}
	for k := range pod.Annotations {
		if strings.HasPrefix(k, cdiAnnotationPrefix) || strings.HasPrefix(k, nvidiaCDIAnnotation) {
			return true
		}
	}
	for _, v := range pod.Spec.Volumes {
		if h := v.HostPath; h != nil && hostDevicePath(h.Path) {
			return true
		}
	}
	domain, _, _ := strings.Cut(names.GPU, "/")
	vgpu := vgpuResources(names)
	gpuResource := func(rl corev1.ResourceList) bool {
		for r := range rl {
			if strings.HasPrefix(string(r), domain+"/") || strings.HasPrefix(string(r), deviceClassResourceDom) || slices.Contains(vgpu[:], string(r)) {
				return true
			}
		}
		return false
	}
	reaches := func(privileged bool, res corev1.ResourceRequirements) bool {
		return privileged || gpuResource(res.Limits) || gpuResource(res.Requests)
	}
	for c := range Containers(&pod.Spec) {
		if reaches(isPrivileged(c.SecurityContext), c.Resources) {
			return true
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		c := &pod.Spec.EphemeralContainers[i]
		if reaches(isPrivileged(c.SecurityContext), c.Resources) {
			return true
		}
	}
	return false
}

// hostDevicePath: /dev or what is under it, however spelt with extra
// slashes and dots (//dev, /./dev/nvidia0); the policies' CEL matches the
// same expression. (The device cgroup still denies a device node to a
// container that is not privileged; the host's root, which node agents
// mount, is not counted.)
func hostDevicePath(p string) bool { return hostDevice.MatchString(p) }

var hostDevice = regexp.MustCompile(`^[/.]*dev([/.].*)?$`)

func isPrivileged(sc *corev1.SecurityContext) bool {
	return sc != nil && sc.Privileged != nil && *sc.Privileged
}

func stringOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// RequiresHook reports whether pod's annotations make the runtime
// require vgpud's hook for every container: the pod-wide key names
// vgpud, and so does every pod- or container-scoped one, which would
// override it.
func RequiresHook(annotations map[string]string) bool {
	if !ListsVgpud(annotations[wellknown.AnnotationRequiredPlugins]) {
		return false
	}
	for k, v := range annotations {
		if strings.HasPrefix(k, wellknown.AnnotationRequiredPlugins+"/") && !ListsVgpud(v) {
			return false
		}
	}
	return true
}

// listsVgpud is the one form admission takes for a required-plugins
// value: a flow list of plain names, vgpud first. Any other spelling
// (a YAML comment, a block list, vgpud later) is refused rather than
// parsed, so that the apiserver's CEL and NRI's YAML cannot read it two
// ways. The policy's regular expression is this one.
var listsVgpud = regexp.MustCompile(ListsVgpudPattern)

// ListsVgpudPattern is listsVgpud's expression, for the policy's test.
const ListsVgpudPattern = `^\["vgpud"(, *"[A-Za-z0-9._-]+")*\]$`

// ListsVgpud reports whether a required-plugins value lists vgpud, in
// the form admission takes.
func ListsVgpud(v string) bool { return listsVgpud.MatchString(v) }
