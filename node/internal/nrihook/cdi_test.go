package nrihook

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// cdiRules names GPU-0 as the node's CDI device nvidia.com/gpu=0, which
// brings /dev/nvidia0 and /dev/nvidiactl; GPU-9 cannot be named.
func cdiRules() Ruleset {
	r := rules()
	r.CDI = func(gpus []string) ([]string, []string, error) {
		var names []string
		for _, g := range gpus {
			switch g {
			case "GPU-0":
				names = append(names, "nvidia.com/gpu=0")
			case "GPU-9":
				return nil, nil, errors.New("no spec names GPU-9")
			}
		}
		return names, []string{"/dev/nvidia0", "/dev/nvidiactl"}, nil
	}
	return r
}

func rule(major, minor int64) *api.LinuxDeviceCgroup {
	return &api.LinuxDeviceCgroup{Allow: true, Type: "c", Major: api.Int64(major), Minor: api.Int64(minor), Access: "rwm"}
}

// A grant on a CDI node is the slice's env and its GPUs' CDI devices; a
// container that already asks for exactly those (their nodes and rules
// too) is let through, and any other NVIDIA device is still refused.
func TestGrantHandsOutCDIDevices(t *testing.T) {
	victim := gpuPod("victim", "GPU-0")
	h, _ := testHook(victim)
	h.rules = cdiRules()
	ctr := &api.Container{Name: "app"}
	adj, _, err := h.CreateContainer(context.Background(), sandbox(victim), ctr)
	if err != nil {
		t.Fatal(err)
	}
	if len(adj.GetCDIDevices()) != 1 || adj.GetCDIDevices()[0].GetName() != "nvidia.com/gpu=0" || envAfter(ctr, adj)["NVIDIA_VISIBLE_DEVICES"] != "GPU-0" {
		t.Fatalf("adjustment %v: want CDI device nvidia.com/gpu=0 and NVIDIA_VISIBLE_DEVICES=GPU-0", adj)
	}
	own := &api.Container{Name: "app", CDIDevices: []*api.CDIDevice{{Name: "nvidia.com/gpu=0"}},
		Annotations: map[string]string{"cdi.k8s.io/own": "nvidia.com/gpu=0"},
		Linux: &api.LinuxContainer{
			Devices:   []*api.LinuxDevice{{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0}, {Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255}},
			Resources: &api.LinuxResources{Devices: []*api.LinuxDeviceCgroup{rule(195, 0), rule(195, 255)}}}}
	if _, _, err := h.CreateContainer(context.Background(), sandbox(victim), own); err != nil {
		t.Errorf("a container asking for its own CDI device: %v", err)
	}
	for name, c := range map[string]*api.Container{
		"another CDI device":      {Name: "app", CDIDevices: []*api.CDIDevice{{Name: "nvidia.com/gpu=1"}}},
		"another CDI annotation":  {Name: "app", Annotations: map[string]string{"cdi.k8s.io/x": "nvidia.com/gpu=0,nvidia.com/gpu=all"}},
		"another GPU's node":      {Name: "app", Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{{Path: "/dev/nvidia1", Type: "c", Major: 195, Minor: 1}}}},
		"another GPU's rule":      {Name: "app", Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Devices: []*api.LinuxDeviceCgroup{rule(195, 1)}}}},
		"every NVIDIA minor rule": {Name: "app", Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Devices: []*api.LinuxDeviceCgroup{{Allow: true, Type: "c", Major: api.Int64(195), Access: "rw"}}}}},
	} {
		if _, _, err := h.CreateContainer(context.Background(), sandbox(victim), c); err == nil || !strings.Contains(err.Error(), "reaches GPUs vgpud did not grant it") {
			t.Errorf("%s: %v; want refused", name, err)
		}
	}
	// Running, as the runtime shows it at a reconnection: its own
	// devices are no escape, another GPU's is.
	d := Decide(containerOf(victim, "app"), h.rules)
	if escaped(d, &api.Container{Env: []string{"NVIDIA_VISIBLE_DEVICES=GPU-0"}, Linux: own.Linux}, h.rules) {
		t.Error("a running container with its own CDI devices counts as escaped")
	}
	if !escaped(d, &api.Container{Env: []string{"NVIDIA_VISIBLE_DEVICES=GPU-0"}, Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{{Path: "/dev/nvidia1"}}}}, h.rules) {
		t.Error("a running container with another GPU's node does not count as escaped")
	}
}

// A grant the node cannot hand out as CDI devices is refused for kubelet
// to retry, never created without its GPUs.
func TestGrantRefusedWhenCDICannotNameIt(t *testing.T) {
	p := gpuPod("p", "GPU-9")
	h, _ := testHook(p)
	h.rules = cdiRules()
	if _, _, err := h.CreateContainer(context.Background(), sandbox(p), &api.Container{Name: "app"}); err == nil || !strings.Contains(err.Error(), "cannot hand container \"app\" its GPUs as CDI devices: no spec names GPU-9") {
		t.Errorf("err = %v", err)
	}
	// A container granted nothing is voided as ever.
	if adj, _, err := h.CreateContainer(context.Background(), sandbox(p), &api.Container{Name: "sidecar"}); err != nil || len(adj.GetCDIDevices()) != 0 {
		t.Errorf("sidecar: %v %v", adj, err)
	}
}

// At a reconnection a node that cannot tell which devices a grant
// brought (CDI's resolution failing, or not known yet) ends no container
// for its device nodes, only for its env.
func TestEscapedOnlyByEnvWhileCDIUnknown(t *testing.T) {
	victim := gpuPod("victim", "GPU-0")
	own := &api.LinuxContainer{Devices: []*api.LinuxDevice{{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0}},
		Resources: &api.LinuxResources{Devices: []*api.LinuxDeviceCgroup{rule(195, 0)}}}
	for name, r := range map[string]Ruleset{
		"not known yet": func() Ruleset { r := cdiRules(); r.CDIKnown = func() bool { return false }; return r }(),
		"resolution fails": func() Ruleset {
			r := cdiRules()
			r.CDI = func([]string) ([]string, []string, error) { return nil, nil, errors.New("spec unreadable") }
			return r
		}(),
	} {
		d := Decide(containerOf(victim, "app"), r)
		if escaped(d, &api.Container{Env: []string{"NVIDIA_VISIBLE_DEVICES=GPU-0"}, Linux: own}, r) {
			t.Errorf("%s: a granted container with its device nodes counts as escaped", name)
		}
		if !escaped(d, &api.Container{Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}, Linux: own}, r) {
			t.Errorf("%s: a container whose env names every GPU does not count as escaped", name)
		}
	}
}
