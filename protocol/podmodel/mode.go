package podmodel

import (
	"fmt"
	"strings"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// GPUMode is how a pod's GPUs are served.
type GPUMode string

const (
	// ModeAny: the pod names no mode, and gets slices of GPUs not in MIG
	// mode, as ModeShared. An instance is only ever asked for: it is
	// held whole and charged whole, which a pod asking a slice does not
	// expect.
	ModeAny GPUMode = ""
	// ModeShared: slices of GPUs not in MIG mode.
	ModeShared GPUMode = "shared"
	// ModeMIG: whole MIG instances only, one per container.
	ModeMIG GPUMode = "mig"
)

// GPUModeOf reads vgpud's gpu-mode annotation, else HAMi's vgpu-mode;
// the error says what to write instead.
func GPUModeOf(a map[string]string) (GPUMode, error) {
	if v, ok := a[wellknown.AnnotationGPUMode]; ok {
		switch m := GPUMode(strings.ToLower(strings.TrimSpace(v))); m {
		case ModeShared, ModeMIG:
			return m, nil
		}
		return ModeAny, fmt.Errorf("annotation %s=%.64q: want %s or %s (leaving it out is %s)", wellknown.AnnotationGPUMode, v, ModeMIG, ModeShared, ModeShared)
	}
	if v, ok := a[wellknown.AnnotationGPUModeHAMi]; ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "mig":
			return ModeMIG, nil
		case "hami-core":
			return ModeShared, nil
		case "mps":
			return ModeAny, fmt.Errorf("annotation %s=mps: vgpud has no MPS mode; write mig or hami-core, or leave it out", wellknown.AnnotationGPUModeHAMi)
		}
		return ModeAny, fmt.Errorf("annotation %s=%.64q: want mig or hami-core (leaving it out is hami-core)", wellknown.AnnotationGPUModeHAMi, v)
	}
	return ModeAny, nil
}

// ModeOf is the mode pod annotations a and its containers cs ask: a
// container that asks a MIG profile by its resource makes the pod a MIG
// pod, which an annotation may say too but not gainsay.
func ModeOf(a map[string]string, cs []ContainerRequest) (GPUMode, error) {
	m, err := GPUModeOf(a)
	if err != nil {
		return m, err
	}
	for _, c := range cs {
		if c.MIGProfile == "" {
			continue
		}
		if m == ModeShared {
			return m, fmt.Errorf("container %q asks MIG profile %s, but the pod's annotations ask slices of GPUs not in MIG mode; drop %s (or %s), or set it to mig", c.Name, c.MIGProfile, wellknown.AnnotationGPUMode, wellknown.AnnotationGPUModeHAMi)
		}
		return ModeMIG, nil
	}
	return m, nil
}

// CheckMode refuses what mode cannot serve: a MIG instance is one CUDA
// device, and CUDA enumerates only one MIG device per process, so under
// ModeMIG each container asks one GPU.
func CheckMode(mode GPUMode, cs []ContainerRequest) error {
	if mode != ModeMIG {
		return nil
	}
	for _, c := range cs {
		if c.GPUs > 1 {
			return fmt.Errorf("container %q asks %d GPUs under %s=mig; a process sees one MIG device, so ask 1 per container (or split the work across containers)", c.Name, c.GPUs, wellknown.AnnotationGPUMode)
		}
	}
	return nil
}
