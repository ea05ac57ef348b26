// Package grant is what a container's GPU slice looks like inside it:
// the environment and mounts that hand it exactly the GPUs, memory and
// cores the leader assigned, and the environment that hands it none. It
// is pure, so the device plugin and the runtime hook give one answer.
package grant

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// Where the interposer's files appear inside a container. HAMi-core reads
// the same paths, so images built for HAMi work unchanged.
const (
	containerLib     = "/usr/local/vgpu/libvgpu.so"
	containerPreload = "/etc/ld.so.preload"
	containerCache   = "/usr/local/vgpu/cache"
	interposerLib    = "libvgpu.so"
	cachesDir        = "containers" // under the interposer directory, one per container
	interposerLoad   = "ld.so.preload"
)

// Void is NVIDIA_VISIBLE_DEVICES for a container that gets no GPU: the
// NVIDIA container runtime then exposes none.
const Void = "void"

// Options are the node's settings that shape every slice.
type Options struct {
	Oversubscribe bool   // memory scaled above 1
	Interposer    string // host directory holding libvgpu.so; "" mounts nothing
}

// Mount is one bind mount into the container.
type Mount struct {
	Host, Container string
	ReadOnly        bool
}

// Slice is what one container receives.
type Slice struct {
	Env    map[string]string
	Mounts []Mount
	// Cache is where in the container the interposer keeps what the
	// container's processes share; "" without an interposer. The runtime
	// hook mounts a small tmpfs there, private to the container, sized,
	// and gone with it; the guessing path can only bind a host
	// directory, CacheDir, which the caller creates and the node sweeps
	// once the pod is gone (SweepCaches).
	Cache    string
	CacheDir string
}

// For is the slice of container c of the pod with UID podUID. priority
// is the container's task priority, when it asks one.
func For(c protocol.ContainerAssignment, podUID string, priority *int, o Options) Slice {
	uuids := make([]string, len(c.GPUs))
	env := make(map[string]string, len(c.GPUs)+5)
	for i, g := range c.GPUs {
		uuids[i] = g.UUID
		env[protocol.EnvMemoryLimitPrefix+strconv.Itoa(i)] = fmt.Sprintf("%dm", g.MemoryMiB)
	}
	env[protocol.EnvVisibleDevices] = strings.Join(uuids, ",")
	// One SM limit per container: the leader gives every GPU of a
	// container the same cores.
	if len(c.GPUs) > 0 {
		env[protocol.EnvSMLimit] = strconv.Itoa(c.GPUs[0].Cores)
	}
	// Always set, so no pod or image env can turn it on.
	env[protocol.EnvOversubscribe] = strconv.FormatBool(o.Oversubscribe)
	if priority != nil {
		env[protocol.EnvTaskPriority] = strconv.Itoa(*priority)
	}
	s := Slice{Env: env}
	if o.Interposer != "" {
		s.Cache = containerCache
		s.CacheDir = filepath.Join(o.Interposer, cachesDir, podUID+"_"+c.Name)
		env[protocol.EnvSharedCache] = containerCache + "/" + podUID + ".cache"
		s.Mounts = []Mount{
			{Host: filepath.Join(o.Interposer, interposerLib), Container: containerLib, ReadOnly: true},
			{Host: filepath.Join(o.Interposer, interposerLoad), Container: containerPreload, ReadOnly: true},
		}
	}
	return s
}

// Owned reports whether env names a variable the slice decides: what a
// pod spec or an image sets for it is never what the container sees. It
// covers the interposer's per-GPU spellings (CUDA_DEVICE_SM_LIMIT_<i>,
// which HAMi-core prefers to CUDA_DEVICE_SM_LIMIT) and the NVIDIA
// container runtime's switches that add devices beside a GPU.
func Owned(name string) bool {
	switch name {
	case protocol.EnvVisibleDevices, protocol.EnvSMLimit, protocol.EnvTaskPriority,
		protocol.EnvOversubscribe, protocol.EnvSharedCache,
		"NVIDIA_MOFED", "NVIDIA_GDS", "NVIDIA_NVSWITCH", "NVIDIA_GDRCOPY", "NVIDIA_IMEX_CHANNELS",
		// Where HAMi-core's interposer loads its CUDA entry points from:
		// pointed at the real libcuda, the limits are gone.
		"CUDA_REDIRECT",
		// The interposer's limit for every GPU, without an index.
		strings.TrimSuffix(protocol.EnvMemoryLimitPrefix, "_"):
		return true
	}
	_, i, ok := PerGPU(name)
	return ok && i >= 0
}

// PerGPU splits a per-GPU variable, CUDA_DEVICE_MEMORY_LIMIT_<i> or
// CUDA_DEVICE_SM_LIMIT_<i>, into its stem and index; ok is false for any
// other name, and i is -1 for a suffix that is not an index.
func PerGPU(name string) (stem string, i int, ok bool) {
	for _, stem := range []string{protocol.EnvMemoryLimitPrefix, protocol.EnvSMLimit + "_"} {
		if rest, found := strings.CutPrefix(name, stem); found {
			n, err := strconv.Atoi(rest)
			if err != nil || n < 0 {
				return stem, -1, true
			}
			return stem, n, true
		}
	}
	return "", 0, false
}

// DeviceListMount reports whether a container path is where the NVIDIA
// container runtime's volume-mounts strategy reads the devices to
// expose: a pod could ask for GPUs there instead of through env. The
// runtime matches by prefix, so this does too.
func DeviceListMount(containerPath string) bool {
	return strings.HasPrefix(filepath.Clean(containerPath), deviceListDir)
}

const deviceListDir = "/var/run/nvidia-container-devices"

// Priority is the task priority container c asks, if it asks one (nil
// for a nil c, or a value out of range, which admission refuses).
func Priority(c *corev1.Container, names protocol.ResourceNames) *int {
	if c == nil {
		return nil
	}
	r, err := podmodel.ContainerRequestOf(c, names)
	if err != nil || !r.HasPriority {
		return nil
	}
	return &r.Priority
}

// PrepareInterposer checks that dir holds libvgpu.so and writes the
// ld.so.preload that makes every process in the container load it.
func PrepareInterposer(dir string) error {
	lib := filepath.Join(dir, interposerLib)
	if _, err := os.Stat(lib); err != nil {
		return fmt.Errorf("interposer: %w; put HAMi-core's libvgpu.so there or leave --interposer-dir empty", err)
	}
	if err := os.WriteFile(filepath.Join(dir, interposerLoad), []byte(containerLib+"\n"), 0o644); err != nil {
		return fmt.Errorf("interposer: %w", err)
	}
	return nil
}
