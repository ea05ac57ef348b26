// Package dradevices is what a node that serves DRA claims publishes
// (its ResourceSlices' devices), as kube-scheduler, DeviceClasses and
// claims read it: each GPU one device that many claims may share, with
// the capacities the stock kube-scheduler books (memory, cores, and a
// slot per sharer) under request policies that give what vgpud's
// extender gives, and each existing MIG instance a device of its own,
// held whole.
package dradevices

import (
	"fmt"
	"hash/fnv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// DriverName is vgpud's DRA driver: a DeviceClass selects its devices by
// it, and attributes and capacities without a domain are in it.
const DriverName = wellknown.DRADriver

// The capacities of a shared GPU, as a claim's capacity.requests names
// them.
const (
	// CapacityMemory is the GPU's memory after the node's scaling, in
	// bytes, requested in whole MiB (gpumem's unit).
	CapacityMemory = "memory"
	// CapacityCores is the GPU's cores after the node's scaling, in
	// percent of one GPU; one claim asks 1 to 100 (gpucores).
	CapacityCores = "cores"
	// CapacitySlots is the node's split: each claim on the GPU takes one,
	// so at most split share it, as on an extender node.
	CapacitySlots = "slots"
)

// The attributes every device carries, for a claim's or a class's
// selectors (device.attributes["gpu.vgpud.io"].<name>).
const (
	AttrType        = "type" // TypeGPU or TypeMIG
	AttrUUID        = "uuid" // the GPU's, or the MIG device's
	AttrIndex       = "index"
	AttrProductName = "productName"
	AttrNUMANode    = "numaNode"
	AttrProfile     = "profile"    // a MIG instance's, such as 1g.10gb
	AttrParentUUID  = "parentUUID" // a MIG instance's GPU
	// AttrNVLinkSet and AttrPCIeSwitchSet name the node's NVLink set, or
	// PCIe-switch set, that holds a GPU (the UUID of its first GPU), for
	// a constraint's matchAttribute. Only a GPU in exactly one set of
	// that link carries it: where sets overlap (a hybrid cube mesh) no
	// one value says which others a GPU is joined to.
	AttrNVLinkSet     = "nvlinkSet"
	AttrPCIeSwitchSet = "pcieSwitchSet"
)

// The values of AttrType.
const (
	TypeGPU = "gpu"
	TypeMIG = "mig"
)

// The device taints the node publishes: no new claim is allocated on a
// tainted GPU; those on it stay. TaintUnhealthy marks a GPU the health
// watcher took out (an XID, a failing query), TaintCordoned one an
// operator cordoned (vgpud.io/cordon).
const (
	TaintUnhealthy = DriverName + "/unhealthy"
	TaintCordoned  = DriverName + "/cordoned"
	// TaintExtenderBooked marks a GPU that pods the extender placed still
	// hold (a node moved to DRA with them running): kube-scheduler's
	// books do not count them, so no claim may join them until they end.
	TaintExtenderBooked = DriverName + "/extender-booked"
)

// Marks say which GPUs, by UUID, carry a taint beside health: cordoned
// by an operator, or held by pods the extender placed.
type Marks struct {
	Cordoned, Booked map[string]bool
}

// ClaimDefaults are the cluster's defaults for a claim that leaves a capacity
// out: the extender's --default-gpumem-percentage and
// --default-gpucores.
type ClaimDefaults struct {
	MemPercent int
	Cores      int // 0: a slot's share
}

// Devices are inv's GPUs and MIG instances as devices, in index order:
// kube-scheduler takes the first that fits, so the order is its
// preference. GPUs in MIG mode are served only through their instances;
// instances the node could make on demand are not offered.
func Devices(inv protocol.Inventory, d ClaimDefaults, m Marks) []resourceapi.Device {
	devs := make([]resourceapi.Device, 0, len(inv.GPUs))
	sets := setAttributes(inv)
	for _, g := range inv.GPUs {
		dev := gpuDevice(g, d)
		for name, v := range sets[g.Index] {
			dev.Attributes[name] = resourceapi.DeviceAttribute{StringValue: ptr.To(v)}
		}
		devs = append(devs, tainted(dev, !g.Healthy, m.Cordoned[g.UUID], m.Booked[g.UUID]))
	}
	for _, g := range inv.MIG {
		for _, in := range g.Instances {
			devs = append(devs, tainted(migDevice(g, in), !g.Healthy, m.Cordoned[g.UUID], m.Booked[in.UUID] || m.Booked[g.UUID]))
		}
	}
	return devs
}

// setAttributes is, by GPU index, the set attributes of each GPU that
// lies in exactly one set of a link.
func setAttributes(inv protocol.Inventory) map[int]map[resourceapi.QualifiedName]string {
	uuids := make(map[int]string, len(inv.GPUs))
	for _, g := range inv.GPUs {
		uuids[g.Index] = g.UUID
	}
	attr := map[string]resourceapi.QualifiedName{protocol.LinkNVLink: AttrNVLinkSet, protocol.LinkPCIeSwitch: AttrPCIeSwitchSet}
	type key struct {
		gpu  int
		name resourceapi.QualifiedName
	}
	in, named := map[key]int{}, map[key]string{}
	for _, s := range inv.Sets {
		name, ok := attr[s.Link]
		if !ok || len(s.GPUs) == 0 || uuids[s.GPUs[0]] == "" {
			continue
		}
		for _, i := range s.GPUs {
			in[key{i, name}]++
			named[key{i, name}] = uuids[s.GPUs[0]]
		}
	}
	out := map[int]map[resourceapi.QualifiedName]string{}
	for k, n := range in {
		if n != 1 {
			continue
		}
		if out[k.gpu] == nil {
			out[k.gpu] = map[resourceapi.QualifiedName]string{}
		}
		out[k.gpu][k.name] = named[k]
	}
	return out
}

// tainted is dev with the taints of a GPU unhealthy, cordoned, or held
// by the extender's pods.
func tainted(dev resourceapi.Device, unhealthy, cordoned, booked bool) resourceapi.Device {
	if unhealthy {
		dev.Taints = append(dev.Taints, resourceapi.DeviceTaint{Key: TaintUnhealthy, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	if cordoned {
		dev.Taints = append(dev.Taints, resourceapi.DeviceTaint{Key: TaintCordoned, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	if booked {
		dev.Taints = append(dev.Taints, resourceapi.DeviceTaint{Key: TaintExtenderBooked, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	return dev
}

// DeviceName is the device name of a GPU or MIG device, from its UUID:
// a GPU's index changes when NVML renumbers the GPUs after one comes or
// goes, and a name that then named another GPU would move the claims
// booked on it, in kube-scheduler's books and the node's. A DNS label:
// "gpu-" or "mig-" for the UUID's prefix, then the rest of an NVIDIA
// UUID as it is (lower-case hex and dashes). A UUID of any other shape
// gets its letters lowered, anything but letters, digits and dashes as
// a dash, and a hash of the whole UUID at the end, so that no two
// UUIDs share a name; at most 63 characters.
func DeviceName(uuid string) string {
	kind, rest := "gpu-", uuid
	switch {
	case strings.HasPrefix(uuid, "GPU-"):
		rest = uuid[len("GPU-"):]
	case strings.HasPrefix(uuid, "MIG-"):
		kind, rest = "mig-", uuid[len("MIG-"):]
	}
	name := []byte(kind + strings.ToLower(rest))
	for i, c := range name {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			name[i] = '-'
		}
	}
	if string(name) == kind+rest && len(name) <= 63 && !strings.HasSuffix(rest, "-") && rest != "" {
		return string(name)
	}
	h := fnv.New32a()
	h.Write([]byte(uuid))
	sum := fmt.Sprintf("-%08x", h.Sum32())
	return strings.TrimRight(string(name[:min(len(name), 63-len(sum))]), "-") + sum
}

func gpuDevice(g protocol.GPU, d ClaimDefaults) resourceapi.Device {
	mem := g.MemoryMiB
	cores := int64(g.Cores)
	return resourceapi.Device{
		Name:                     DeviceName(g.UUID),
		AllowMultipleAllocations: ptr.To(true),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrType:        {StringValue: ptr.To(TypeGPU)},
			AttrUUID:        {StringValue: ptr.To(g.UUID)},
			AttrIndex:       {IntValue: ptr.To(int64(g.Index))},
			AttrProductName: {StringValue: ptr.To(g.Model)},
			AttrNUMANode:    {IntValue: ptr.To(int64(g.NUMA))},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			// In MiB steps from 1 MiB; a claim that names none gets
			// the cluster's default share of the memory.
			CapacityMemory: {
				Value: *mib(mem),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:    mib(max(podmodel.DefaultMemMiB(mem, d.MemPercent), 1)),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: mib(1), Step: mib(1)},
				},
			},
			// 1 to 100 (a whole GPU's), never 0, which an interposer
			// reads as no limit; none named is the cluster's default.
			CapacityCores: {
				Value: *count(cores),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:    count(int64(podmodel.DefaultCores(g, d.Cores))),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: count(1), Max: count(min(cores, protocol.MaxPercent)), Step: count(1)},
				},
			},
			CapacitySlots: {
				Value: *count(int64(max(g.Split, 1))),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default: count(1), ValidValues: []resource.Quantity{*count(1)},
				},
			},
		},
	}
}

func migDevice(g protocol.MIGGPU, in protocol.MIGInstance) resourceapi.Device {
	return resourceapi.Device{
		Name: DeviceName(in.UUID),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrType:        {StringValue: ptr.To(TypeMIG)},
			AttrUUID:        {StringValue: ptr.To(in.UUID)},
			AttrIndex:       {IntValue: ptr.To(int64(g.Index))},
			AttrProductName: {StringValue: ptr.To(g.Model)},
			AttrNUMANode:    {IntValue: ptr.To(int64(g.NUMA))},
			AttrProfile:     {StringValue: ptr.To(in.Profile)},
			AttrParentUUID:  {StringValue: ptr.To(g.UUID)},
		},
		// Held whole: what a selector reads, not what claims share.
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityMemory: {Value: *mib(in.MemoryMiB)},
			CapacityCores:  {Value: *count(int64(g.Cores(in)))},
		},
	}
}

func mib(n int64) *resource.Quantity { return resource.NewQuantity(n<<20, resource.BinarySI) }

func count(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }
