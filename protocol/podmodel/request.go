package podmodel

import (
	"fmt"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// ContainerRequest is what one container asks of vgpud, read from its
// limits (or its requests where a limit is absent). Zero means absent.
type ContainerRequest struct {
	Name          string
	Kind          ContainerKind
	GPUs          int   // distinct physical GPUs
	HasGPUs       bool  // the GPU resource was written, even as 0
	MemoryMiB     int64 // per GPU
	MemoryPercent int   // per GPU, 1..100
	Cores         int   // percent of each GPU's SMs, 0..100
	Priority      int
	HasPriority   bool
	// MIGProfile is a MIG profile asked by its own resource
	// (names.MIGResource), one instance of it; GPUs is then 1 and the
	// pod is served in ModeMIG.
	MIGProfile string
}

// Wants reports whether the container asks for any vGPU resource.
func (c ContainerRequest) Wants() bool {
	return c.GPUs > 0 || c.MemoryMiB > 0 || c.MemoryPercent > 0 || c.Cores > 0 || c.HasGPUs || c.MIGProfile != ""
}

// Requests reads every container of pod in the order kubelet admits them:
// init containers first, then app containers. An error names the container,
// the resource and the value.
func Requests(pod *corev1.Pod, names wellknown.ResourceNames) ([]ContainerRequest, error) {
	out := make([]ContainerRequest, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for c, k := range Containers(&pod.Spec) {
		r, err := ContainerRequestOf(c, names)
		if err != nil {
			return nil, err
		}
		r.Kind = k
		out = append(out, r)
	}
	return out, nil
}

// VGPUNames lists the vGPU resources container c names in its limits or
// requests, present even as 0, the per-profile MIG resources last;
// priority alone asks for no GPU and is not among them. It looks only at
// which names are present, so it never fails.
func VGPUNames(c *corev1.Container, names wellknown.ResourceNames) []string {
	var out []string
	for _, n := range vgpuResources(names) {
		if namesResource(c, n) {
			out = append(out, n)
		}
	}
	return append(out, MIGResources(c, names)...)
}

// Wants reports whether any container of pod names a vGPU resource
// (VGPUNames). It allocates nothing: the leader's informer asks it of
// every pod event.
func Wants(pod *corev1.Pod, names wellknown.ResourceNames) bool {
	for c := range Containers(&pod.Spec) {
		for _, n := range vgpuResources(names) {
			if namesResource(c, n) {
				return true
			}
		}
		if namesMIG(c, names) {
			return true
		}
	}
	return false
}

// vgpuResources are the resources that ask for a vGPU; priority alone
// does not.
func vgpuResources(names wellknown.ResourceNames) [4]string {
	return [...]string{names.GPU, names.GPUMem, names.GPUMemPercentage, names.GPUCores}
}

// namesResource reports whether c names resource in its limits or requests.
func namesResource(c *corev1.Container, resource string) bool {
	_, l := c.Resources.Limits[corev1.ResourceName(resource)]
	_, r := c.Resources.Requests[corev1.ResourceName(resource)]
	return l || r
}

// NeedsDevices reports whether kubelet will ask the device plugin for
// devices for some container of pod: one asks a non-zero count of the GPU
// resource, however its other vGPU resources read.
func NeedsDevices(pod *corev1.Pod, names wellknown.ResourceNames) bool {
	res := corev1.ResourceName(names.GPU)
	for c := range Containers(&pod.Spec) {
		if l, ok := c.Resources.Limits[res]; ok && !l.IsZero() {
			return true
		}
		if r, ok := c.Resources.Requests[res]; ok && !r.IsZero() {
			return true
		}
	}
	return false
}

// ContainerRequestOf reads one container and checks each value's range.
func ContainerRequestOf(c *corev1.Container, names wellknown.ResourceNames) (ContainerRequest, error) {
	r := ContainerRequest{Name: c.Name}
	var err error
	var ok bool
	var v int64
	if v, r.HasGPUs, err = quantity(c, names.GPU, 0, protocol.MaxGPUsPerContainer); err != nil {
		return r, err
	}
	r.GPUs = int(v)
	if r.MemoryMiB, _, err = quantity(c, names.GPUMem, 1, protocol.MaxMemoryMiB); err != nil {
		return r, err
	}
	if v, _, err = quantity(c, names.GPUMemPercentage, 1, protocol.MaxPercent); err != nil {
		return r, err
	}
	r.MemoryPercent = int(v)
	if v, _, err = quantity(c, names.GPUCores, 0, 100); err != nil {
		return r, err
	}
	r.Cores = int(v)
	if v, ok, err = quantity(c, names.Priority, 0, protocol.MaxPriority); err != nil {
		return r, err
	}
	r.Priority, r.HasPriority = int(v), ok
	if r.MemoryMiB > 0 && r.MemoryPercent > 0 {
		return r, fmt.Errorf("container %q: set either %s or %s, not both", c.Name, names.GPUMem, names.GPUMemPercentage)
	}
	if r.HasGPUs && r.GPUs == 0 && (r.MemoryMiB > 0 || r.MemoryPercent > 0 || r.Cores > 0) {
		return r, fmt.Errorf("container %q: %s is 0 but it asks for GPU memory or cores; set %s to 1 or more, or drop the other GPU resources", c.Name, names.GPU, names.GPU)
	}
	if r.MIGProfile, err = migProfile(c, names); err != nil {
		return r, err
	}
	if r.MIGProfile != "" {
		if r.HasGPUs || r.MemoryMiB > 0 || r.MemoryPercent > 0 || r.Cores > 0 {
			asked := VGPUNames(c, names) // the profile's resource last
			return r, fmt.Errorf("container %q asks %s and also %s; ask one way: the profile's resource alone, or %s with %s or %s under %s: mig",
				c.Name, names.MIGResource(r.MIGProfile), strings.Join(asked[:len(asked)-1], ", "), names.GPU, names.GPUMem, names.GPUCores, wellknown.AnnotationGPUMode)
		}
		r.GPUs = 1
		return r, nil
	}
	// A zero count would be bound with an empty assignment that kubelet
	// never allocates: on a guessing node such a pod held the node's
	// in-flight slot for good, at no quota. No pod needs to ask for none.
	if r.HasGPUs && r.GPUs == 0 {
		return r, fmt.Errorf("container %q: %s is 0; a container that needs no GPU names no vGPU resource: remove %s (or set it to 1 or more)", c.Name, names.GPU, names.GPU)
	}
	return r, nil
}

// quantity reads name from limits, else requests, and checks lo..hi.
func quantity(c *corev1.Container, name string, lo, hi int64) (int64, bool, error) {
	q, ok := c.Resources.Limits[corev1.ResourceName(name)]
	if !ok {
		q, ok = c.Resources.Requests[corev1.ResourceName(name)]
	}
	if !ok {
		return 0, false, nil
	}
	v, err := integer(q)
	if err != nil {
		return 0, true, fmt.Errorf("container %q: %s %q: %w", c.Name, name, q.String(), err)
	}
	if v < lo || v > hi {
		return 0, true, fmt.Errorf("container %q: %s is %d; it must be within %d..%d", c.Name, name, v, lo, hi)
	}
	return v, true, nil
}

func integer(q resource.Quantity) (int64, error) {
	if v, ok := q.AsInt64(); ok {
		return v, nil
	}
	// AsInt64 refuses some whole values written with binary suffixes (100Ti);
	// below 2^53 a float64 holds them exactly.
	f := q.AsApproximateFloat64()
	if f != math.Trunc(f) || math.Abs(f) >= 1<<53 {
		return 0, fmt.Errorf("not a whole number within range")
	}
	return int64(f), nil
}
