package nrihook

import (
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/vgpud/vgpud/protocol/containerenv"
)

// A container of a pod HAMi placed keeps exactly the GPUs HAMi's record
// names: its env, envFrom or image naming any other, or a CDI device,
// refuses it; what HAMi's device plugin set passes.
func TestKeepHoldsAHAMiContainerToItsRecord(t *testing.T) {
	d := Decision{Action: Keep, Devices: []string{"GPU-0", "GPU-1"}}
	env := func(kv ...string) *api.Container { return &api.Container{Name: "app", Env: kv} }
	for _, tc := range []struct {
		name string
		ctr  *api.Container
		bad  string // in the refusal; "" to pass
	}{
		{"the device plugin's own", env("PATH=/bin", containerenv.EnvVisibleDevices+"=GPU-1"), ""},
		{"both of the pod's", env(containerenv.EnvVisibleDevices + "=GPU-0,GPU-1"), ""},
		{"none at all", env(containerenv.EnvVisibleDevices + "=void"), ""},
		{"an envFrom's all after the plugin's", env(containerenv.EnvVisibleDevices+"=GPU-0", containerenv.EnvVisibleDevices+"=all"), containerenv.EnvVisibleDevices + "=all"},
		{"a CUDA image's all before the plugin's", env(containerenv.EnvVisibleDevices+"=all", containerenv.EnvVisibleDevices+"=GPU-0"), ""},
		{"the MIG instance HAMi's plugin hands out, of a GPU of the record", env(containerenv.EnvVisibleDevices + "=MIG-a"), ""},
		{"a MIG instance of another GPU", env(containerenv.EnvVisibleDevices + "=MIG-b"), "MIG-b"},
		{"what HAMi's plugin sets for GDS and IMEX", env("NVIDIA_GDS=enabled", "NVIDIA_IMEX_CHANNELS=0,1"), ""},
		{"every IMEX channel", env("NVIDIA_IMEX_CHANNELS=all"), "NVIDIA_IMEX_CHANNELS=all"},
		{"the volume-mounts strategy, naming its own", &api.Container{Name: "app", Env: []string{containerenv.EnvVisibleDevices + "=/var/run/nvidia-container-devices"},
			Mounts: []*api.Mount{{Destination: "/var/run/nvidia-container-devices/GPU-0"}}}, ""},
		{"a mount naming every GPU", &api.Container{Name: "app", Mounts: []*api.Mount{{Destination: "/var/run/nvidia-container-devices/all"}}}, "mount /var/run/nvidia-container-devices/all"},
		{"the device plugin's generated CDI vendor", &api.Container{Name: "app", CDIDevices: []*api.CDIDevice{{Name: "k8s.device-plugin.nvidia.com/gpu=all"}}}, "CDI device"},
		{"an index", env(containerenv.EnvVisibleDevices + "=0"), containerenv.EnvVisibleDevices + "=0"},
		{"another GPU of the node", env(containerenv.EnvVisibleDevices + "=GPU-0,GPU-7"), "GPU-7"},
		{"another owned device name asking more", env("NVIDIA_MOFED=all"), "NVIDIA_MOFED=all"},
		{"a CDI device", &api.Container{Name: "app", CDIDevices: []*api.CDIDevice{{Name: "nvidia.com/gpu=all"}}}, "CDI device nvidia.com/gpu=all"},
		{"a CDI annotation", &api.Container{Name: "app", Annotations: map[string]string{"cdi.k8s.io/x": "nvidia.com/gpu=3"}}, "CDI annotation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := func(uuid string) string { return map[string]string{"MIG-a": "GPU-1", "MIG-b": "GPU-9"}[uuid] }
			_, err := (&Hook{rules: Ruleset{MIGParent: parent}}).apply(d, tc.ctr)
			switch {
			case tc.bad == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad) || !strings.Contains(err.Error(), "GPU-0,GPU-1")):
				t.Fatalf("got %v; want a refusal naming %q and the record's GPUs", err, tc.bad)
			}
			// The same judgement when the hook reconnects to a running one.
			if got := escaped(d, tc.ctr, Ruleset{MIGParent: parent}); got != (tc.bad != "") {
				t.Errorf("escaped = %v on reconnection", got)
			}
		})
	}
}

// At reconnection a running container is judged as CreateContainer
// judges one: a device node, a device rule or a CDI device that reaches
// a GPU outside the books is an escape, whatever its env says.
func TestEscapedJudgesDevicesAsCreateDoes(t *testing.T) {
	void := Decision{Action: Void}
	clean := &api.Container{Env: []string{containerenv.EnvVisibleDevices + "=void"}}
	if escaped(void, clean, Ruleset{}) {
		t.Fatal("a voided container with nothing else escaped")
	}
	for name, ctr := range map[string]*api.Container{
		"a device node": {Env: clean.Env, Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{{Path: "/dev/nvidia0", Type: "c", Major: 195}}}},
		"a CDI device":  {Env: clean.Env, CDIDevices: []*api.CDIDevice{{Name: "nvidia.com/gpu=0"}}},
		"a device rule": {Env: clean.Env, Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Devices: []*api.LinuxDeviceCgroup{{Allow: true, Type: "c", Major: &api.OptionalInt64{Value: 195}, Access: "rw"}}}}},
	} {
		if !escaped(void, ctr, Ruleset{}) {
			t.Errorf("%s: not an escape at reconnection", name)
		}
	}
}
