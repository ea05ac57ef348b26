// Package containerenv is the env a GPU container receives (read by CUDA
// and HAMi-core's interposer), and the names vgpud owns there, which
// admission, the runtime hook and the docs are tested against.
package containerenv

// Environment a GPU container receives, readable by HAMi-core's libvgpu.so.
const (
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// EnvMemoryLimitPrefix + the GPU's position in EnvVisibleDevices; value "<MiB>m".
	EnvMemoryLimitPrefix = "CUDA_DEVICE_MEMORY_LIMIT_"
	EnvSMLimit           = "CUDA_DEVICE_SM_LIMIT"
	EnvTaskPriority      = "CUDA_TASK_PRIORITY"
	EnvOversubscribe     = "CUDA_OVERSUBSCRIBE"
	EnvSharedCache       = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
)
