package grant

import (
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/containerenv"
)

func TestForSetsEverySliceName(t *testing.T) {
	c := protocol.ContainerAssignment{Name: "main", GPUs: []protocol.GPUSlice{{UUID: "GPU-a", MemoryMiB: 1000, Cores: 30}, {UUID: "GPU-b", MemoryMiB: 2000, Cores: 30}}}
	prio := 1
	s := For(c, "uid", &prio, Shape{})
	want := map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b", "CUDA_DEVICE_MEMORY_LIMIT_0": "1000m", "CUDA_DEVICE_MEMORY_LIMIT_1": "2000m",
		"CUDA_DEVICE_SM_LIMIT": "30", "CUDA_OVERSUBSCRIBE": "false", "CUDA_TASK_PRIORITY": "1"}
	if len(s.Env) != len(want) || len(s.Mounts) != 0 || s.CacheDir != "" {
		t.Fatalf("slice %+v", s)
	}
	for k, v := range want {
		if s.Env[k] != v {
			t.Errorf("%s=%q, want %q", k, s.Env[k], v)
		}
		if containerenv.OwnedEnv(k) == containerenv.EnvFree {
			t.Errorf("the slice sets %s but does not own it", k)
		}
	}
}

func TestOwned(t *testing.T) {
	for kv, want := range map[string]bool{
		"CUDA_DEVICE_SM_LIMIT_0=1": true, "CUDA_DEVICE_MEMORY_LIMIT_12=1m": true, "CUDA_DEVICE_MEMORY_LIMIT=1m": true, "NVIDIA_MOFED=enabled": true, "CUDA_REDIRECT=x": true,
		"CUDA_VISIBLE_DEVICES=1": true, "LD_PRELOAD=/x.so": true, "GPU_CORE_UTILIZATION_POLICY=disable": true, "NVIDIA_VISIBLE_DEVICES=all": true,
		"GPU_CORE_UTILIZATION_POLICY=force": false, "NVIDIA_VISIBLE_DEVICES=void": false,
		"CUDA_DEVICE_MEMORY_LIMIT_x=1m": false, "NVIDIA_DRIVER_CAPABILITIES=all": false, "PATH=/bin": false,
	} {
		name, value, _ := strings.Cut(kv, "=")
		if Owned(name, value) != want {
			t.Errorf("Owned(%s) = %v", kv, !want)
		}
	}
	for p, want := range map[string]bool{"/var/run/nvidia-container-devices/GPU-a": true, "/var/run/nvidia-container-devicesall": true, "/var/run//nvidia-container-devices/x/../all": true, "/var/run/other": false} {
		if DeviceListMount(p) != want {
			t.Errorf("DeviceListMount(%s) = %v", p, !want)
		}
	}
}

// A MIG instance is handed by its UUID, whole: its SM limit is all it
// sees, not its share of the parent.
func TestForHandsAMIGInstanceWhole(t *testing.T) {
	c := protocol.ContainerAssignment{Name: "main", GPUs: []protocol.GPUSlice{{UUID: "MIG-a", MemoryMiB: 4864, Cores: 15, MIG: true}}}
	s := For(c, "uid", nil, Shape{Interposer: "/var/lib/vgpud/interposer"})
	if s.Env["NVIDIA_VISIBLE_DEVICES"] != "MIG-a" || s.Env["CUDA_DEVICE_SM_LIMIT"] != "100" || s.Env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "4864m" {
		t.Errorf("env %v", s.Env)
	}
	if len(s.Mounts) != 0 || s.CacheDir != "" {
		t.Errorf("the interposer is mounted into a MIG container: %+v", s)
	}
}
