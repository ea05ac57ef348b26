package dradevices

import (
	"fmt"
	"hash/fnv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vgpud/vgpud/protocol"
)

func testInventory() protocol.Inventory {
	return protocol.Inventory{
		GPUs: []protocol.GPU{
			{UUID: "GPU-a", Index: 0, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, Cores: 100, Split: 4, NUMA: 1, Healthy: true},
			{UUID: "GPU-b", Index: 1, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 61440, Cores: 200, Split: 10, Healthy: false},
		},
		MIG: []protocol.MIGGPU{{UUID: "GPU-m", Index: 2, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, SMs: 98, Healthy: true, Instances: []protocol.MIGInstance{
			{UUID: "MIG-1", Profile: "3g.20gb", MemoryMiB: 20096, SMs: 42, Start: 4, Size: 4},
			{UUID: "MIG-2", Profile: "1g.5gb", MemoryMiB: 4864, SMs: 14, Start: 0, Size: 1},
		}}},
	}
}

// What a claim gets where it names no capacity is what the extender
// gives a container that names none; a claim takes one slot, so at most
// split share a GPU; an unhealthy GPU is tainted, not withdrawn (claims
// on it stay); MIG instances are held whole.
func TestDevicesCarryVgpudRules(t *testing.T) {
	devs := Devices(testInventory(), ClaimDefaults{MemPercent: 100}, Marks{})
	var names []string
	for _, d := range devs {
		names = append(names, d.Name)
	}
	if got := fmt.Sprint(names); got != "[gpu-a gpu-b mig-1 mig-2]" {
		t.Fatalf("devices %s", got)
	}
	a := devs[0]
	if a.AllowMultipleAllocations == nil || !*a.AllowMultipleAllocations || len(a.Taints) != 0 {
		t.Errorf("gpu-0: shared %v, taints %v; want shared, untainted", a.AllowMultipleAllocations, a.Taints)
	}
	for _, c := range []struct {
		dev             resourceapi.Device
		name            resourceapi.QualifiedName
		value, def, max string
	}{
		{a, CapacityMemory, "40Gi", "40Gi", ""},
		{a, CapacityCores, "100", "25", "100"},
		{a, CapacitySlots, "4", "1", ""},
		// Core scaling 2: a claim still asks at most one GPU's 100;
		// the default is a slot's share of the scaled cores.
		{devs[1], CapacityCores, "200", "20", "100"},
		{devs[1], CapacitySlots, "10", "1", ""},
	} {
		got := c.dev.Capacity[c.name]
		if q(got.Value) != c.value || got.RequestPolicy == nil || q(*got.RequestPolicy.Default) != c.def {
			t.Errorf("%s %s: %s default %v; want %s default %s", c.dev.Name, c.name, q(got.Value), got.RequestPolicy, c.value, c.def)
			continue
		}
		if r := got.RequestPolicy.ValidRange; c.max != "" && (r == nil || r.Max == nil || q(*r.Max) != c.max || q(*r.Min) != "1") {
			t.Errorf("%s %s: range %+v; want 1..%s", c.dev.Name, c.name, r, c.max)
		}
	}
	if v := a.Capacity[CapacitySlots].RequestPolicy.ValidValues; len(v) != 1 || q(v[0]) != "1" {
		t.Errorf("slots' valid values %v; want [1]", v)
	}
	if r := a.Capacity[CapacityMemory].RequestPolicy.ValidRange; r == nil || q(*r.Min) != "1Mi" || q(*r.Step) != "1Mi" || r.Max != nil {
		t.Errorf("memory range %+v; want from 1Mi in 1Mi steps", r)
	}
	if *a.Attributes[AttrUUID].StringValue != "GPU-a" || *a.Attributes[AttrNUMANode].IntValue != 1 || *a.Attributes[AttrType].StringValue != TypeGPU {
		t.Errorf("gpu-0 attributes %v", a.Attributes)
	}
	if tt := devs[1].Taints; len(tt) != 1 || tt[0].Key != TaintUnhealthy || tt[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Errorf("unhealthy gpu-1's taints %v", tt)
	}
	m := devs[2]
	if m.AllowMultipleAllocations != nil || *m.Attributes[AttrProfile].StringValue != "3g.20gb" || *m.Attributes[AttrParentUUID].StringValue != "GPU-m" ||
		q(m.Capacity[CapacityMemory].Value) != "20096Mi" || q(m.Capacity[CapacityCores].Value) != "43" || m.Capacity[CapacityMemory].RequestPolicy != nil {
		t.Errorf("MIG device %+v", m)
	}
}

// The cluster's defaults reach the request policies as the extender
// applies them: a memory percentage, a fixed cores default (at most 99).
func TestDevicesFollowTheClusterDefaults(t *testing.T) {
	a := Devices(testInventory(), ClaimDefaults{MemPercent: 50, Cores: 100}, Marks{})[0]
	if got := q(*a.Capacity[CapacityMemory].RequestPolicy.Default); got != "20Gi" {
		t.Errorf("memory default %s; want 20Gi (50 %%)", got)
	}
	if got := q(*a.Capacity[CapacityCores].RequestPolicy.Default); got != "99" {
		t.Errorf("cores default %s; want 99 (a default never holds a GPU whole)", got)
	}
}

func q(v resource.Quantity) string { return v.String() }

// A device is named by its UUID, which renumbering leaves alone, as a
// DNS label.
func TestDeviceNameFromTheUUID(t *testing.T) {
	for uuid, want := range map[string]string{
		"GPU-b6be3dbf-b2db-5f32-7bc6-adc6c0fe76a6": "gpu-b6be3dbf-b2db-5f32-7bc6-adc6c0fe76a6",
		"MIG-5e1c7d2a-0f3b-5a6e-9c1d-2b3a4c5d6e7f": "mig-5e1c7d2a-0f3b-5a6e-9c1d-2b3a4c5d6e7f",
		"MIG-GPU-abc/7/0":                          "mig-gpu-abc-7-0-" + hash("MIG-GPU-abc/7/0"),
		"MIG-gpu-abc-7-0":                          "mig-gpu-abc-7-0",
		"GPU-" + strings.Repeat("A", 70):           "gpu-" + strings.Repeat("a", 50) + "-" + hash("GPU-"+strings.Repeat("A", 70)),
	} {
		if got := DeviceName(uuid); got != want {
			t.Errorf("DeviceName(%s) = %s; want %s", uuid, got, want)
		}
	}
}

// A cordoned GPU is tainted like an unhealthy one, and both taints
// stand together.
func TestDevicesTaintTheCordoned(t *testing.T) {
	devs := Devices(testInventory(), ClaimDefaults{MemPercent: 100}, Marks{Cordoned: map[string]bool{"GPU-a": true, "GPU-b": true, "GPU-m": true}, Booked: map[string]bool{"GPU-a": true, "MIG-2": true}})
	var got []string
	for _, d := range devs {
		var keys []string
		for _, tt := range d.Taints {
			keys = append(keys, tt.Key)
		}
		got = append(got, d.Name+"="+strings.Join(keys, "+"))
	}
	want := "[gpu-a=gpu.vgpud.io/cordoned+gpu.vgpud.io/extender-booked gpu-b=gpu.vgpud.io/unhealthy+gpu.vgpud.io/cordoned mig-1=gpu.vgpud.io/cordoned mig-2=gpu.vgpud.io/cordoned+gpu.vgpud.io/extender-booked]"
	if fmt.Sprint(got) != want {
		t.Errorf("taints %v; want %s", got, want)
	}
}

func hash(uuid string) string {
	h := fnv.New32a()
	h.Write([]byte(uuid))
	return fmt.Sprintf("%08x", h.Sum32())
}

// A GPU in one NVLink (or PCIe-switch) set carries that set's name, so
// matchAttribute keeps a claim's GPUs in it; one in two overlapping sets
// carries none, and the constraint never takes it.
func TestDevicesNameTheirOneSet(t *testing.T) {
	inv := protocol.Inventory{Sets: []protocol.GPUSet{
		{Link: protocol.LinkNVLink, GPUs: []int{0, 1}},
		{Link: protocol.LinkNVLink, GPUs: []int{2, 3}},
		{Link: protocol.LinkNVLink, GPUs: []int{3, 4}},
		{Link: protocol.LinkPCIeSwitch, GPUs: []int{1, 2}},
		{Link: "ultra-link", GPUs: []int{0, 4}},
	}}
	for i := range 5 {
		inv.GPUs = append(inv.GPUs, protocol.GPU{UUID: fmt.Sprintf("GPU-%d", i), Index: i, MemoryMiB: 1024, Cores: 100, Split: 2, Healthy: true})
	}
	var got []string
	for _, d := range Devices(inv, ClaimDefaults{MemPercent: 100}, Marks{}) {
		s := d.Name
		for _, a := range []resourceapi.QualifiedName{AttrNVLinkSet, AttrPCIeSwitchSet} {
			if v, ok := d.Attributes[a]; ok {
				s += " " + string(a) + "=" + *v.StringValue
			}
		}
		got = append(got, s)
	}
	want := "[gpu-0 nvlinkSet=GPU-0 gpu-1 nvlinkSet=GPU-0 pcieSwitchSet=GPU-1 gpu-2 nvlinkSet=GPU-2 pcieSwitchSet=GPU-1 gpu-3 gpu-4 nvlinkSet=GPU-3]"
	if fmt.Sprint(got) != want {
		t.Errorf("set attributes\n %v\nwant\n %s", got, want)
	}
}
