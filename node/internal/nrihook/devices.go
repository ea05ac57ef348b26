package nrihook

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/vgpud/vgpud/protocol"
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
func foreignGPUs(ctr *api.Container) []string {
	var found []string
	for _, d := range ctr.GetLinux().GetDevices() {
		if strings.HasPrefix(d.GetPath(), "/dev/nvidia") || (d.GetType() == "c" && d.GetMajor() == nvidiaMajor) {
			found = append(found, "device node "+d.GetPath())
		}
	}
	for _, d := range ctr.GetCDIDevices() {
		if cdiNVIDIA(d.GetName()) {
			found = append(found, "CDI device "+d.GetName())
		}
	}
	for _, k := range slices.Sorted(maps.Keys(ctr.GetAnnotations())) {
		if v := ctr.GetAnnotations()[k]; strings.HasPrefix(k, cdiAnnotationPrefix) && cdiNVIDIA(v) {
			found = append(found, fmt.Sprintf("CDI annotation %s=%s", k, v))
		}
	}
	for _, r := range ctr.GetLinux().GetResources().GetDevices() {
		if !r.GetAllow() || (r.GetType() != "c" && r.GetType() != "a" && r.GetType() != "") {
			continue
		}
		switch m := r.GetMajor().Get(); {
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
// mig classes, or NVIDIA's DRA driver's vendor. NVIDIA's network devices
// (nvidia.com/<other class>, the SR-IOV and RDMA plugins') are not; a
// CDI device of any name that brings a GPU's node is caught by the
// device nodes, which containerd resolves before the hook.
func cdiNVIDIA(names string) bool {
	for _, n := range strings.Split(names, ",") {
		n = strings.TrimSpace(n)
		if strings.HasPrefix(n, "nvidia.com/gpu=") || strings.HasPrefix(n, "nvidia.com/mig") || strings.HasPrefix(n, "k8s.gpu.nvidia.com/") {
			return true
		}
	}
	return false
}

// beyondHAMi lists what in ctr, a container of a pod HAMi placed, names
// GPUs beyond devices (HAMi's record of the pod): a device name in its
// env naming any other GPU ("all", an index, another UUID), or an owned
// device name other than NVIDIA_VISIBLE_DEVICES at all; a CDI device or
// annotation naming an NVIDIA GPU. Device nodes and cgroup rules are
// HAMi's device plugin's to pass, and are not judged here.
func beyondHAMi(ctr *api.Container, devices []string) []string {
	var found []string
	for _, kv := range ctr.GetEnv() {
		name, value, _ := strings.Cut(kv, "=")
		if protocol.OwnedEnv(name) != protocol.EnvDevice || value == "" || value == protocol.VisibleDevicesNone || value == protocol.VisibleDevicesVoid {
			continue
		}
		if name != protocol.EnvVisibleDevices {
			found = append(found, "env "+kv)
			continue
		}
		for _, d := range strings.Split(value, ",") {
			if !slices.Contains(devices, strings.TrimSpace(d)) {
				found = append(found, "env "+kv)
				break
			}
		}
	}
	for _, f := range foreignGPUs(ctr) {
		if strings.HasPrefix(f, "CDI ") {
			found = append(found, f)
		}
	}
	return found
}
