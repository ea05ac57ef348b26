package podmodel

import (
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// NVIDIARuntimeClasses are the RuntimeClasses that hand a container the
// GPUs its env names: the GPU Operator's. A pod that runs under one
// could reach a GPU.
var NVIDIARuntimeClasses = []string{"nvidia", "nvidia-cdi", "nvidia-legacy"}

// ReachesGPU reports whether pod could reach a GPU by any way a runtime
// gives one, so that the runtime must not create its containers without
// vgpud's hook: a GPU resource (vGPU, per-profile MIG, or any of the
// GPU domain's), an NVIDIA runtime class, a privileged container, a
// host path under /dev (or the host's root), or a resource claim (DRA
// hands devices through CDI). The manifest's vgpud-runtime-hook-required
// policy says the same in CEL (webhook/hook_test.go holds them equal).
func ReachesGPU(pod *corev1.Pod, names wellknown.ResourceNames) bool {
	if slices.Contains(NVIDIARuntimeClasses, stringOr(pod.Spec.RuntimeClassName)) || len(pod.Spec.ResourceClaims) > 0 {
		return true
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
			if strings.HasPrefix(string(r), domain+"/") || slices.Contains(vgpu[:], string(r)) {
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

// hostDevicePath: /dev, what is under it, or the host's root, however
// spelt with extra slashes and dots (//dev, /./dev/nvidia0); the
// policies' CEL matches the same expression.
func hostDevicePath(p string) bool { return hostDevice.MatchString(p) }

var hostDevice = regexp.MustCompile(`^[/.]*(dev([/.].*)?)?$`)

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
