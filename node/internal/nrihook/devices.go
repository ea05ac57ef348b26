package nrihook

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/vgpud/vgpud/node/internal/grant"
	"github.com/vgpud/vgpud/protocol/containerenv"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// nvidiaMajor is the NVIDIA driver's character device major: every
// /dev/nvidia<N>, nvidiactl and nvidia-modeset.
const nvidiaMajor = 195

// cdiAnnotationPrefix names the annotations through which containerd
// injects CDI devices (a runtime class, or a pod's own annotations where
// the runtime passes them on).
const cdiAnnotationPrefix = "cdi.k8s.io/"

// foreignGPUs lists what reaches an NVIDIA GPU in ctr other than the env
// vgpud sets: device nodes, CDI devices (a DRA driver's, another device
// plugin's, a CDI annotation's) and device-cgroup rules. vgpud's device
// plugin hands out none of these, and the NVIDIA runtime adds its own
// only after the hook, from the env the hook set; so any of them is a
// GPU outside the books.
//
// What granted names is inside the books: the grant's own CDI devices,
// the device nodes they bring, and the device rules of those nodes.
func foreignGPUs(ctr *api.Container, granted cdiGrant) []string {
	var found []string
	for _, d := range ctr.GetLinux().GetDevices() {
		if slices.Contains(granted.nodes, d.GetPath()) {
			continue
		}
		if strings.HasPrefix(d.GetPath(), "/dev/nvidia") || (d.GetType() == "c" && d.GetMajor() == nvidiaMajor) {
			found = append(found, "device node "+d.GetPath())
		}
	}
	for _, d := range ctr.GetCDIDevices() {
		if cdiNVIDIA(d.GetName()) && !slices.Contains(granted.names, d.GetName()) {
			found = append(found, "CDI device "+d.GetName())
		}
	}
	for _, k := range slices.Sorted(maps.Keys(ctr.GetAnnotations())) {
		if v := ctr.GetAnnotations()[k]; strings.HasPrefix(k, cdiAnnotationPrefix) && cdiNVIDIA(granted.others(v)) {
			found = append(found, fmt.Sprintf("CDI annotation %s=%s", k, v))
		}
	}
	minors := granted.minors()
	for _, r := range ctr.GetLinux().GetResources().GetDevices() {
		if !r.GetAllow() || (r.GetType() != "c" && r.GetType() != "a" && r.GetType() != "") {
			continue
		}
		switch m, n := r.GetMajor().Get(), r.GetMinor().Get(); {
		case m != nil && *m == nvidiaMajor && r.GetType() == "c" && n != nil && slices.Contains(minors, *n):
		case m != nil && *m == nvidiaMajor && n != nil:
			found = append(found, fmt.Sprintf("device cgroup rule %s %d:%d %s", r.GetType(), nvidiaMajor, *n, r.GetAccess()))
		case m != nil && *m == nvidiaMajor:
			found = append(found, fmt.Sprintf("device cgroup rule %s %d:* %s", r.GetType(), nvidiaMajor, r.GetAccess()))
		case m == nil && strings.ContainsAny(r.GetAccess(), "rw"):
			// Every major: the NVIDIA driver's among them (a privileged
			// container, which has that, is exempt before this).
			found = append(found, fmt.Sprintf("device cgroup rule %s *:* %s", r.GetType(), r.GetAccess()))
		}
	}
	return found
}

// cdiNVIDIA says whether a CDI device list (comma-separated qualified
// names, vendor/class=name) names an NVIDIA GPU: the toolkit's gpu and
// mig classes, NVIDIA's DRA driver's vendor, or a claim vgpud's own DRA
// driver prepared. NVIDIA's network devices
// (nvidia.com/<other class>, the SR-IOV and RDMA plugins') are not; a
// CDI device of any name that brings a GPU's node is caught by the
// device nodes, which containerd resolves before the hook.
func cdiNVIDIA(names string) bool {
	for _, n := range strings.Split(names, ",") {
		n = strings.TrimSpace(n)
		// Any vendor ending in nvidia.com: the toolkit's (nvidia.com,
		// runtime.nvidia.com, management.nvidia.com), the device plugin's
		// generated k8s.device-plugin.nvidia.com, the DRA driver's.
		vendor, class, _ := strings.Cut(n, "/")
		if (vendor == "nvidia.com" || strings.HasSuffix(vendor, ".nvidia.com")) && (strings.HasPrefix(class, "gpu") || strings.HasPrefix(class, "mig")) {
			return true
		}
		if strings.HasPrefix(n, "k8s.gpu.nvidia.com/") || strings.HasPrefix(n, wellknown.DRAClaimCDIKind+"=") {
			return true
		}
	}
	return false
}

// beyondHAMi lists what in ctr, a container of a pod HAMi placed, names
// GPUs beyond devices (HAMi's record of the pod; parent, where not nil,
// is a MIG instance's GPU, so that the instance HAMi's plugin hands out
// passes where the record names its GPU):
//   - NVIDIA_VISIBLE_DEVICES whose last value (the one the NVIDIA
//     runtime reads: an image's "all" before the plugin's value is
//     overridden by it) names any other GPU: "all", an index, another
//     UUID;
//   - another owned device name whose last value asks more than HAMi's
//     plugin sets (enabled, disabled, or IMEX channel numbers);
//   - a mount where the runtime reads devices from volume mounts, naming
//     any other GPU;
//   - a CDI device or annotation naming an NVIDIA GPU.
//
// Device nodes and cgroup rules are HAMi's device plugin's to pass, and
// are not judged here.
func beyondHAMi(ctr *api.Container, devices []string, parent func(uuid string) string) []string {
	ok := func(d string) bool {
		d = strings.TrimSpace(d)
		if slices.Contains(devices, d) {
			return true
		}
		return parent != nil && strings.HasPrefix(d, "MIG-") && slices.Contains(devices, parent(d))
	}
	last := map[string]string{}
	for _, kv := range ctr.GetEnv() {
		if name, value, _ := strings.Cut(kv, "="); containerenv.OwnedEnv(name) == containerenv.EnvDevice {
			last[name] = value
		}
	}
	var found []string
	for _, name := range slices.Sorted(maps.Keys(last)) {
		value := last[name]
		switch {
		case value == "" || value == containerenv.VisibleDevicesNone || value == containerenv.VisibleDevicesVoid:
		case name == containerenv.EnvVisibleDevices && value == grant.DeviceListDir:
			// The volume-mounts strategy: the mounts below name them.
		case name == containerenv.EnvVisibleDevices:
			for _, d := range strings.Split(value, ",") {
				if !ok(d) {
					found = append(found, "env "+name+"="+value)
					break
				}
			}
		case value == "enabled" || value == "disabled":
		case name == "NVIDIA_IMEX_CHANNELS" && strings.Trim(value, "0123456789,") == "":
		default:
			found = append(found, "env "+name+"="+value)
		}
	}
	for _, m := range ctr.GetMounts() {
		if dst := filepath.Clean(m.GetDestination()); grant.DeviceListMount(dst) && !ok(filepath.Base(dst)) {
			found = append(found, "mount "+dst)
		}
	}
	for _, f := range foreignGPUs(ctr, cdiGrant{}) {
		if strings.HasPrefix(f, "CDI ") {
			found = append(found, f)
		}
	}
	return found
}
