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
	"github.com/vgpud/vgpud/protocol/containerenv"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
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

// Shape is what the node's settings make of every slice.
type Shape struct {
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
func For(c protocol.ContainerAssignment, podUID string, priority *int, o Shape) Slice {
	uuids := make([]string, len(c.GPUs))
	env := make(map[string]string, len(c.GPUs)+5)
	for i, g := range c.GPUs {
		uuids[i] = g.UUID
		env[containerenv.EnvMemoryLimitPrefix+strconv.Itoa(i)] = fmt.Sprintf("%dm", g.MemoryMiB)
	}
	env[containerenv.EnvVisibleDevices] = strings.Join(uuids, ",")
	// One SM limit per container: the leader gives every GPU of a
	// container the same cores.
	if len(c.GPUs) > 0 {
		cores := c.GPUs[0].Cores
		if c.GPUs[0].MIG {
			// A MIG instance's Cores are its share of the parent, which
			// its hardware already holds it to: it may use all it sees.
			cores = protocol.MaxPercent
		}
		env[containerenv.EnvSMLimit] = strconv.Itoa(cores)
	}
	// Always set, so no pod or image env can turn it on.
	env[containerenv.EnvOversubscribe] = strconv.FormatBool(o.Oversubscribe)
	if priority != nil {
		env[containerenv.EnvTaskPriority] = strconv.Itoa(*priority)
	}
	s := Slice{Env: env}
	if o.Interposer != "" && !allMIG(c) {
		s.Cache = containerCache
		s.CacheDir = filepath.Join(o.Interposer, cachesDir, podUID+"_"+c.Name)
		env[containerenv.EnvSharedCache] = containerCache + "/" + podUID + ".cache"
		s.Mounts = []Mount{
			{Host: filepath.Join(o.Interposer, interposerLib), Container: containerLib, ReadOnly: true},
			{Host: filepath.Join(o.Interposer, interposerLoad), Container: containerPreload, ReadOnly: true},
		}
	}
	return s
}

// Owned reports whether a granted container's env may not set name to
// value: a name vgpud owns (containerenv.OwnedEnv, either kind) that the
// slice does not set, unless to a value a pod may choose. A per-GPU
// spelling whose suffix is no index names nothing the interposer reads.
func Owned(name, value string) bool {
	if containerenv.OwnedEnv(name) == containerenv.EnvFree || containerenv.EnvAllowed(name, value) {
		return false
	}
	_, i, perGPU := containerenv.PerGPUEnv(name)
	return !perGPU || i >= 0
}

// DeviceListMount reports whether a container path is where the NVIDIA
// container runtime's volume-mounts strategy reads the devices to
// expose: a pod could ask for GPUs there instead of through env. The
// runtime matches by prefix, so this does too.
func DeviceListMount(containerPath string) bool {
	return strings.HasPrefix(filepath.Clean(containerPath), DeviceListDir)
}

// DeviceListDir is where the NVIDIA runtime's volume-mounts strategy
// reads the devices to expose, one mount per device.
const DeviceListDir = "/var/run/nvidia-container-devices"

// Priority is the task priority container c asks, if it asks one (nil
// for a nil c, or a value out of range, which admission refuses).
func Priority(c *corev1.Container, names wellknown.ResourceNames) *int {
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

// allMIG reports whether every slice of c is a MIG instance, which its
// hardware holds to its memory and SMs: HAMi-core's interposer is not
// known to work there, and HAMi's own MIG mode leaves it out too.
func allMIG(c protocol.ContainerAssignment) bool {
	for _, g := range c.GPUs {
		if !g.MIG {
			return false
		}
	}
	return len(c.GPUs) > 0
}
