package grant

import (
	"testing"

	"github.com/vgpud/vgpud/protocol"
)

func TestForSetsEverySliceName(t *testing.T) {
	c := protocol.ContainerAssignment{Name: "main", GPUs: []protocol.GPUSlice{{UUID: "GPU-a", MemoryMiB: 1000, Cores: 30}, {UUID: "GPU-b", MemoryMiB: 2000, Cores: 30}}}
	prio := 1
	s := For(c, "uid", &prio, Options{})
	want := map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b", "CUDA_DEVICE_MEMORY_LIMIT_0": "1000m", "CUDA_DEVICE_MEMORY_LIMIT_1": "2000m",
		"CUDA_DEVICE_SM_LIMIT": "30", "CUDA_OVERSUBSCRIBE": "false", "CUDA_TASK_PRIORITY": "1"}
	if len(s.Env) != len(want) || len(s.Mounts) != 0 || s.CacheDir != "" {
		t.Fatalf("slice %+v", s)
	}
	for k, v := range want {
		if s.Env[k] != v {
			t.Errorf("%s=%q, want %q", k, s.Env[k], v)
		}
		if !Owned(k) {
			t.Errorf("the slice sets %s but does not own it", k)
		}
	}
}

func TestOwned(t *testing.T) {
	for name, want := range map[string]bool{
		"CUDA_DEVICE_SM_LIMIT_0": true, "CUDA_DEVICE_MEMORY_LIMIT_12": true, "CUDA_DEVICE_MEMORY_LIMIT": true, "NVIDIA_MOFED": true, "CUDA_REDIRECT": true,
		"CUDA_DEVICE_MEMORY_LIMIT_x": false, "CUDA_VISIBLE_DEVICES": false, "NVIDIA_DRIVER_CAPABILITIES": false, "PATH": false,
	} {
		if Owned(name) != want {
			t.Errorf("Owned(%s) = %v", name, !want)
		}
	}
	for p, want := range map[string]bool{"/var/run/nvidia-container-devices/GPU-a": true, "/var/run/nvidia-container-devicesall": true, "/var/run//nvidia-container-devices/x/../all": true, "/var/run/other": false} {
		if DeviceListMount(p) != want {
			t.Errorf("DeviceListMount(%s) = %v", p, !want)
		}
	}
}
