// Package cdidevices names a node's GPUs as the devices of its NVIDIA CDI
// spec (what nvidia-ctk cdi generate writes, or the GPU operator in CDI
// mode), so that the runtime hook hands a container its GPUs as CDI
// devices where the runtime injects them, and knows which device nodes
// those bring. The spec is the node's own (root's directories, mounted
// read-only); nothing a tenant writes names a device here.
package cdidevices

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/vgpud/vgpud/node/internal/preflight"
)

// The modes of --cdi.
const (
	// ModeAuto hands out a GPU as a CDI device where the runtime injects
	// CDI devices and the node's NVIDIA spec names that GPU.
	ModeAuto = "auto"
	// ModeOn requires it: a grant the spec cannot name is refused.
	ModeOn = "on"
	// ModeOff hands out GPUs by env alone (the NVIDIA runtime's).
	ModeOff = "off"
)

// Modes are the values --cdi takes.
func Modes() []string { return []string{ModeAuto, ModeOn, ModeOff} }

// kind is the NVIDIA toolkit's CDI kind for GPUs and MIG instances.
const kind = "nvidia.com/gpu"

// Resolver names GPUs as CDI devices. Runtime is the latest reading of
// the runtime's configuration (false before one); Index is a whole GPU's
// NVML index, by UUID (false for a MIG instance or one not known).
type Resolver struct {
	Mode    string
	Runtime func() (preflight.CDI, bool)
	Index   func(uuid string) (int, bool)

	mu    sync.Mutex
	cache *cdi.Cache
	dirs  []string
}

// Devices are the CDI devices of gpus (UUIDs), by qualified name, and
// the device nodes they bring; none where the node hands GPUs out by env.
func (r *Resolver) Devices(gpus []string) (names, nodes []string, err error) {
	if r == nil || r.Mode == ModeOff || len(gpus) == 0 {
		return nil, nil, nil
	}
	rt, read := r.Runtime()
	switch {
	case !read:
		// Whether the runtime injects CDI devices decides what the
		// container gets: not guessed; the reading comes within seconds.
		return nil, nil, fmt.Errorf("the runtime's configuration has not been read yet, so it cannot tell whether the runtime injects CDI devices")
	case !rt.Enabled && r.Mode == ModeOn:
		return nil, nil, fmt.Errorf("--cdi=on, but the runtime injects no CDI devices (containerd: enable_cdi, cdi_spec_dirs)")
	case !rt.Enabled:
		return nil, nil, nil
	}
	cache := r.cacheFor(mounted(rt.SpecDirs))
	for _, uuid := range gpus {
		dev := r.device(cache, uuid)
		if dev == nil {
			if r.Mode == ModeOn {
				return nil, nil, fmt.Errorf("--cdi=on, but no %s spec in %s names GPU %s (by UUID, or a whole GPU by its index): generate one with nvidia-ctk cdi generate --device-name-strategy=uuid", kind, strings.Join(rt.SpecDirs, ", "), uuid)
			}
			continue
		}
		names = append(names, dev.GetQualifiedName())
		for _, n := range dev.ContainerEdits.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
		for _, n := range dev.GetSpec().ContainerEdits.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
	}
	slices.Sort(nodes)
	return names, slices.Compact(nodes), nil
}

// device is the spec's device for uuid: named by it (the uuid
// strategy), else, for a whole GPU, by its index (index, type-index).
func (r *Resolver) device(cache *cdi.Cache, uuid string) *cdi.Device {
	names := []string{uuid}
	if i, ok := r.Index(uuid); ok {
		names = append(names, strconv.Itoa(i), "gpu"+strconv.Itoa(i))
	}
	for _, n := range names {
		if d := cache.GetDevice(kind + "=" + n); d != nil && oneGPU(d) {
			return d
		}
	}
	return nil
}

// oneGPU says whether d brings at most one GPU's device node
// (/dev/nvidiaN; a MIG instance brings its parent's), and its spec none
// to every device: a device that brings more ("all", a hand-written
// spec) would hand out GPUs outside the grant, so it names none.
func oneGPU(d *cdi.Device) bool {
	n := 0
	for _, node := range d.ContainerEdits.DeviceNodes {
		if gpuNode(node.Path) {
			n++
		}
	}
	for _, node := range d.GetSpec().ContainerEdits.DeviceNodes {
		if gpuNode(node.Path) {
			return false
		}
	}
	return n <= 1
}

// gpuNode says whether path is a GPU's own device node, /dev/nvidiaN.
func gpuNode(path string) bool {
	rest, ok := strings.CutPrefix(path, "/dev/nvidia")
	if !ok || rest == "" {
		return false
	}
	_, err := strconv.Atoi(rest)
	return err == nil
}

// mounted are dirs as vgpud's container sees them: the DaemonSet mounts
// the host's /var/run/cdi, which is its /run/cdi.
func mounted(dirs []string) []string {
	out := make([]string, len(dirs))
	for i, d := range dirs {
		if strings.HasPrefix(d, "/run/") {
			d = "/var" + d
		}
		out[i] = d
	}
	return out
}

// cacheFor is the CDI cache of dirs, made anew where the runtime's
// directories changed; it follows their files as they change.
func (r *Resolver) cacheFor(dirs []string) *cdi.Cache {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cache == nil || !slices.Equal(r.dirs, dirs) {
		if r.cache != nil {
			_ = r.cache.Configure(cdi.WithAutoRefresh(false))
		}
		// NewCache never fails; its errors are per spec, and a spec
		// that does not parse names no device.
		r.cache, _ = cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(true))
		r.dirs = slices.Clone(dirs)
	}
	return r.cache
}

// Close stops following the spec directories.
func (r *Resolver) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cache != nil {
		_ = r.cache.Configure(cdi.WithAutoRefresh(false))
	}
}

// Edits are what the node's NVIDIA spec does to a container for GPU
// uuid, its device's edits after the spec's common ones, without their
// env: the runtime hook alone sets a container's GPU env. A DRA claim's
// own CDI device carries them, so it needs the runtime to inject CDI
// devices and the spec to name the GPU, whatever the mode.
func (r *Resolver) Edits(uuid string) (cdispecs.ContainerEdits, error) {
	rt, read := r.Runtime()
	switch {
	case !read:
		return cdispecs.ContainerEdits{}, fmt.Errorf("the runtime's configuration has not been read yet, so it cannot tell whether the runtime injects CDI devices")
	case !rt.Enabled:
		return cdispecs.ContainerEdits{}, fmt.Errorf("DRA hands GPUs out as CDI devices, but the runtime injects none (containerd: enable_cdi, cdi_spec_dirs)")
	}
	dev := r.device(r.cacheFor(mounted(rt.SpecDirs)), uuid)
	if dev == nil {
		return cdispecs.ContainerEdits{}, fmt.Errorf("no %s spec in %s names GPU %s (by UUID, or a whole GPU by its index): generate one with nvidia-ctk cdi generate --device-name-strategy=uuid", kind, strings.Join(rt.SpecDirs, ", "), uuid)
	}
	var out cdispecs.ContainerEdits
	for _, e := range []cdispecs.ContainerEdits{dev.GetSpec().ContainerEdits, dev.ContainerEdits} {
		out.DeviceNodes = append(out.DeviceNodes, e.DeviceNodes...)
		out.Hooks = append(out.Hooks, e.Hooks...)
		out.Mounts = append(out.Mounts, e.Mounts...)
		out.AdditionalGIDs = append(out.AdditionalGIDs, e.AdditionalGIDs...)
	}
	return out, nil
}
