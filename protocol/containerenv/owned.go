package containerenv

import (
	"slices"
	"strconv"
	"strings"
)

// The environment variables vgpud owns: what a pod spec, an envFrom
// source or an image sets for them is never what a container sees. This
// is the one list; admission (the vgpud-slice-env policy in
// manifests/vgpud.yaml), the runtime hook and docs/security.md are tested
// against it.
//
// Two kinds. Device names make the NVIDIA container runtime expose
// devices: they are refused in every container's spec, and the hook sets
// NVIDIA_VISIBLE_DEVICES on every container it decides, which a
// container granted no GPU gets as "void" (the runtime then exposes
// nothing, whatever the others say). Slice names limit a slice, read by
// CUDA or by HAMi-core's interposer: owned on containers that ask for a
// GPU only, so a container that asks for none may preload jemalloc.
var (
	deviceEnv = []string{
		EnvVisibleDevices,
		"NVIDIA_MOFED", "NVIDIA_GDS", "NVIDIA_NVSWITCH", "NVIDIA_GDRCOPY", "NVIDIA_IMEX_CHANNELS",
	}
	sliceEnv = []string{
		// The interposer's limit for every GPU, without an index.
		strings.TrimSuffix(EnvMemoryLimitPrefix, "_"),
		EnvSMLimit, EnvTaskPriority, EnvOversubscribe, EnvSharedCache, EnvCorePolicy,
		// Reorders the devices the per-GPU limits are indexed by.
		"CUDA_VISIBLE_DEVICES",
		// Where the interposer loads its CUDA entry points from: pointed
		// at the real libcuda, the limits are gone.
		"CUDA_REDIRECT",
		// A library preloaded before the interposer resolves CUDA's
		// entry points first.
		"LD_PRELOAD",
	}
	// sliceEnvPrefixes are the interposer's per-GPU spellings, <prefix><i>.
	sliceEnvPrefixes = []string{EnvMemoryLimitPrefix, EnvSMLimit + "_"}
	// allowedEnv are the values of an owned name a pod may still set:
	// the core policies the webhook injects (HAMi's third, disable, never
	// limits), and hiding every GPU.
	allowedEnv = map[string][]string{
		EnvCorePolicy:     {CorePolicyDefault, CorePolicyForce},
		EnvVisibleDevices: {VisibleDevicesNone, VisibleDevicesVoid},
	}
)

// Core-limit policies passed to the container as EnvCorePolicy, which
// HAMi-core reads: default limits cores only when the GPU is shared,
// force always limits.
const (
	EnvCorePolicy      = "GPU_CORE_UTILIZATION_POLICY"
	CorePolicyDefault  = "default"
	CorePolicyForce    = "force"
	VisibleDevicesNone = "none"
	VisibleDevicesVoid = "void"
)

// EnvKind says whether vgpud owns an environment variable, and where.
type EnvKind int

const (
	EnvFree   EnvKind = iota // a pod's own
	EnvDevice                // owned on every container
	EnvSlice                 // owned on containers that ask for a GPU
)

// OwnedEnv is the kind of name.
func OwnedEnv(name string) EnvKind {
	switch {
	case slices.Contains(deviceEnv, name):
		return EnvDevice
	case slices.Contains(sliceEnv, name):
		return EnvSlice
	}
	if _, _, ok := PerGPUEnv(name); ok {
		return EnvSlice
	}
	return EnvFree
}

// EnvAllowed reports whether a pod may set owned name to value.
func EnvAllowed(name, value string) bool {
	return slices.Contains(allowedEnv[name], value)
}

// PerGPUEnv splits a per-GPU variable, CUDA_DEVICE_MEMORY_LIMIT_<i> or
// CUDA_DEVICE_SM_LIMIT_<i>, into its prefix and index; ok is false for
// any other name, and i is -1 for a suffix that is not an index.
func PerGPUEnv(name string) (prefix string, i int, ok bool) {
	for _, p := range sliceEnvPrefixes {
		if rest, found := strings.CutPrefix(name, p); found {
			n, err := strconv.Atoi(rest)
			if err != nil || n < 0 {
				return p, -1, true
			}
			return p, n, true
		}
	}
	return "", 0, false
}

// DeviceEnvNames, SliceEnvNames and SliceEnvPrefixes list the owned
// names, for the tests that hold admission and the docs to them.
func DeviceEnvNames() []string   { return slices.Clone(deviceEnv) }
func SliceEnvNames() []string    { return slices.Clone(sliceEnv) }
func SliceEnvPrefixes() []string { return slices.Clone(sliceEnvPrefixes) }

// AllowedEnvValues lists the values of name a pod may set.
func AllowedEnvValues(name string) []string { return slices.Clone(allowedEnv[name]) }
