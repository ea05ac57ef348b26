package nrihook

import (
	"context"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// A container that reaches a GPU by a way other than the env vgpud sets
// is refused, whether it was granted a slice or none.
func TestGPUsByAnotherWayAreRefused(t *testing.T) {
	granted := gpuPod("granted", "GPU-0")
	plain := gpuPod("plain", "")
	plain.Spec.Containers = plain.Spec.Containers[1:]
	major := func(m int64) *api.OptionalInt64 { return &api.OptionalInt64{Value: m} }
	for _, tc := range []struct {
		name string
		ctr  *api.Container
		want string
	}{
		{"a device node", &api.Container{Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{{Path: "/dev/nvidia1", Type: "c", Major: 195, Minor: 1}}}}, "device node /dev/nvidia1"},
		{"a device node under another name", &api.Container{Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{{Path: "/dev/gpu", Type: "c", Major: 195, Minor: 0}}}}, "device node /dev/gpu"},
		{"a CDI device", &api.Container{CDIDevices: []*api.CDIDevice{{Name: "nvidia.com/gpu=all"}}}, "CDI device nvidia.com/gpu=all"},
		{"a CDI annotation", &api.Container{Annotations: map[string]string{"cdi.k8s.io/extra": "vendor.example/x=1, nvidia.com/gpu=0"}}, "CDI annotation cdi.k8s.io/extra"},
		{"a device cgroup rule", &api.Container{Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Devices: []*api.LinuxDeviceCgroup{{Allow: true, Type: "c", Major: major(195), Access: "rwm"}}}}}, "device cgroup rule c 195:* rwm"},
		{"a rule for every device", &api.Container{Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Devices: []*api.LinuxDeviceCgroup{{Allow: true, Type: "a", Access: "rw"}}}}}, "device cgroup rule a *:* rw"},
		{"NVIDIA's DRA driver", &api.Container{CDIDevices: []*api.CDIDevice{{Name: "k8s.gpu.nvidia.com/device=gpu-0"}}}, "CDI device k8s.gpu.nvidia.com/device=gpu-0"},
	} {
		// In the container granted GPU-0, and in one granted none.
		for ctrName, sb := range map[string]*api.PodSandbox{"app": sandbox(granted), "sidecar": sandbox(plain)} {
			h, _ := testHook(granted, plain)
			tc.ctr.Name = ctrName
			_, _, err := h.CreateContainer(context.Background(), sb, tc.ctr)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "did not grant") {
				t.Errorf("%s in container %s: %v; want refused naming %q", tc.name, ctrName, err, tc.want)
			}
		}
	}
	// Other devices and other vendors' CDI devices are not vgpud's.
	h, _ := testHook(granted)
	// NVIDIA's network devices (the SR-IOV and RDMA plugins') are no GPU.
	ctr := &api.Container{Name: "app", CDIDevices: []*api.CDIDevice{{Name: "vendor.example/fpga=0"}, {Name: "nvidia.com/net-pci=0000:3b:00.1"}},
		Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229}}}}
	if _, _, err := h.CreateContainer(context.Background(), sandbox(granted), ctr); err != nil {
		t.Errorf("another vendor's devices: %v", err)
	}
}
