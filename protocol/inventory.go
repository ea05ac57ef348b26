package protocol

import (
	"fmt"

	"github.com/vgpud/vgpud/protocol/mig"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Inventory is the value of wellknown.AnnotationGPUs on a node.
type Inventory struct {
	Version int `json:"version"`
	// Requires names the features a reader must understand to use this
	// value at all (skew.go).
	Requires []string `json:"requires,omitempty"`
	// Features names what the node's vgpud honours in a requires list
	// (skew.go): the leader places a pod whose assignment requires a
	// feature only on a node that lists it, so no node refuses a pod it
	// was sent during a rolling upgrade.
	Features []string `json:"features,omitempty"`
	GPUs     []GPU    `json:"gpus"`
	// Sets are the groups of GPUs joined more closely than the node at
	// large, which the node works out once from NVML so that placement
	// only looks them up. A leader that does not read them places as
	// before.
	Sets []GPUSet `json:"sets,omitempty"`
	// MIG are the node's GPUs in MIG mode, each with its instances. They
	// are not among GPUs: a leader that does not read this field must not
	// place shared slices on a GPU only its instances can serve.
	MIG []MIGGPU `json:"mig,omitempty"`
}

// MIGGPU is a GPU in MIG mode: it serves containers only through its
// instances, each held whole by one container.
type MIGGPU struct {
	UUID      string `json:"uuid"`
	Index     int    `json:"index"`
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memoryMiB"` // the whole GPU's
	// SMs are the multiprocessors the whole GPU gives its instances (its
	// largest profile's): what an instance's share is counted against.
	SMs       int           `json:"sms"`
	NUMA      int           `json:"numa"`
	Healthy   bool          `json:"healthy"`
	Instances []MIGInstance `json:"instances"`
	// Possible, where the node makes instances on demand, are those it
	// may make: each allowed profile at each placement the driver lists
	// that no instance in Instances takes, named OnDemandID. One it has
	// made carries its MIG device's UUID in Made and is not in
	// Instances. A leader that does not read this places nothing on
	// them, and books them per assignment (GPUSlice.Make): booking one
	// blocks every possible instance it overlaps.
	Possible []MIGInstance `json:"possible,omitempty"`
	// Kept are instances the node made for a pod that has ended, kept
	// because processes still hold them: offered to none (no instance of
	// Possible overlaps one), and charged to the namespace of the pod
	// they were made for (Pod) until they go, as the leader booked it.
	// Each is named as in Possible, with its device's UUID in Made. A
	// leader that does not read this charges them to nobody.
	Kept []MIGInstance `json:"kept,omitempty"`
}

// MIGInstance is one MIG device: a GPU instance with its compute
// instance, as NVML lists it.
type MIGInstance struct {
	UUID      string `json:"uuid"`    // MIG-<uuid>, what a container is handed
	Profile   string `json:"profile"` // NVIDIA's name: 1g.10gb, 1c.2g.20gb, 1g.10gb+me
	MemoryMiB int64  `json:"memoryMiB"`
	SMs       int    `json:"sms"`
	// Start and Size are the instance's placement in the GPU's memory
	// slices, as NVML gives it.
	Start int `json:"start"`
	Size  int `json:"size"`
	// Made, for a possible instance (MIGGPU.Possible), is the UUID of
	// the MIG device the node made for it; empty until then.
	Made string `json:"made,omitempty"`
	// Pod, for a kept instance (MIGGPU.Kept), is the UID of the pod the
	// node made it for; "" charges it to nobody.
	Pod string `json:"pod,omitempty"`
}

// placement is where the instance sits among its GPU's memory slices.
func (in MIGInstance) placement() mig.Span { return mig.Span{Start: in.Start, Size: in.Size} }

// Cores is the share of its GPU's SMs the instance takes, in percent,
// rounded up: what quota and the books charge for it.
func (g MIGGPU) Cores(in MIGInstance) int {
	if g.SMs <= 0 {
		return 100
	}
	return min(max((in.SMs*100+g.SMs-1)/g.SMs, 1), 100)
}

// maxMIGInstances bounds a GPU's instances: NVIDIA's GPUs make at most 8.
const maxMIGInstances = 16

// maxProfileLen bounds a MIG profile name.
const maxProfileLen = 32

// GPUSet is a group of a node's GPUs, by index, every two of which are
// joined by Link.
type GPUSet struct {
	Link string `json:"link"` // LinkNVLink or LinkPCIeSwitch; a reader skips one it does not know
	GPUs []int  `json:"gpus"`
}

// The links a GPUSet names, closest first.
const (
	// LinkNVLink: every two GPUs of the set reach each other over NVLink
	// (directly, or through an NVSwitch). Each such set is a largest one:
	// no other GPU reaches all of it.
	LinkNVLink = "nvlink"
	// LinkPCIeSwitch: the set's GPUs sit behind one PCIe switch, so their
	// traffic does not cross the host bridge.
	LinkPCIeSwitch = "pcie-switch"
)

// maxSets bounds an inventory's sets, which placement scans per pod.
const maxSets = 256

// GPU is one physical GPU as the scheduler sees it, after the node's memory
// and core scaling were applied.
type GPU struct {
	UUID      string `json:"uuid"`
	Index     int    `json:"index"`
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memoryMiB"`
	Cores     int    `json:"cores"`
	Split     int    `json:"split"`
	NUMA      int    `json:"numa"`
	Healthy   bool   `json:"healthy"`
}

// EncodeInventory validates inv and renders it as the annotation value.
func EncodeInventory(inv Inventory) (string, error) {
	inv.Version = Version
	if err := inv.Validate(); err != nil {
		return "", err
	}
	return marshal(inv, "inventory")
}

// DecodeInventory parses and validates a wellknown.AnnotationGPUs value.
func DecodeInventory(s string) (Inventory, error) {
	var inv Inventory
	if err := decode(s, &inv); err != nil {
		return Inventory{}, fmt.Errorf("decode %s: %w", wellknown.AnnotationGPUs, err)
	}
	if err := inv.Validate(); err != nil {
		return Inventory{}, fmt.Errorf("decode %s: %w", wellknown.AnnotationGPUs, err)
	}
	if len(inv.Requires) == 0 {
		inv.Requires = nil // "requires": [] says what its absence says
	}
	if len(inv.Features) == 0 {
		inv.Features = nil
	}
	return inv, nil
}

// Validate reports the first thing that makes inv unusable.
func (inv Inventory) Validate() error {
	if err := checkVersion(inv.Version, inv.Requires); err != nil {
		return err
	}
	if len(inv.Features) > maxFeatures {
		return fmt.Errorf("features lists %d names, more than %d", len(inv.Features), maxFeatures)
	}
	seenUUID := make(map[string]bool, len(inv.GPUs))
	seenIndex := make(map[int]bool, len(inv.GPUs))
	for i, g := range inv.GPUs {
		switch {
		case g.UUID == "":
			return fmt.Errorf("gpus[%d]: uuid is empty", i)
		case seenUUID[g.UUID]:
			return fmt.Errorf("gpus[%d]: uuid %s appears twice", i, g.UUID)
		case seenIndex[g.Index]:
			return fmt.Errorf("gpus[%d]: index %d appears twice", i, g.Index)
		case g.Index < 0:
			return fmt.Errorf("gpus[%d]: index %d is negative", i, g.Index)
		case g.MemoryMiB <= 0 || g.MemoryMiB > MaxMemoryMiB:
			return fmt.Errorf("gpus[%d] %s: memoryMiB %d must be within 1..%d", i, g.UUID, g.MemoryMiB, MaxMemoryMiB)
		case g.Cores <= 0 || g.Cores > MaxScaledCores:
			return fmt.Errorf("gpus[%d] %s: cores %d must be within 1..%d", i, g.UUID, g.Cores, MaxScaledCores)
		case g.Split <= 0 || g.Split > MaxSplit:
			return fmt.Errorf("gpus[%d] %s: split %d must be within 1..%d", i, g.UUID, g.Split, MaxSplit)
		}
		seenUUID[g.UUID] = true
		seenIndex[g.Index] = true
	}
	if err := validateMIG(inv.MIG, seenUUID, seenIndex); err != nil {
		return err
	}
	if len(inv.Sets) > maxSets {
		return fmt.Errorf("sets lists %d, more than %d", len(inv.Sets), maxSets)
	}
	for i, s := range inv.Sets {
		if s.Link != LinkNVLink && s.Link != LinkPCIeSwitch {
			continue // a newer link kind, with rules this build does not know: its reader skips it
		}
		if len(s.GPUs) < 2 {
			return fmt.Errorf("sets[%d]: %d GPUs; a set joins at least 2", i, len(s.GPUs))
		}
		seen := map[int]bool{}
		for _, idx := range s.GPUs {
			if !seenIndex[idx] || seen[idx] {
				return fmt.Errorf("sets[%d]: GPU index %d is not one of the node's, or appears twice", i, idx)
			}
			seen[idx] = true
		}
	}
	return nil
}

// validateMIG checks the MIG GPUs and their instances; UUIDs and indices
// are unique across them and the shared GPUs (seen), which it extends.
func validateMIG(gpus []MIGGPU, seenUUID map[string]bool, seenIndex map[int]bool) error {
	if len(gpus) > MaxGPUsPerNode {
		return fmt.Errorf("mig lists %d GPUs, more than %d", len(gpus), MaxGPUsPerNode)
	}
	for i, g := range gpus {
		switch {
		case g.UUID == "" || seenUUID[g.UUID]:
			return fmt.Errorf("mig[%d]: uuid %q is empty or appears twice", i, g.UUID)
		case g.Index < 0 || seenIndex[g.Index]:
			return fmt.Errorf("mig[%d] %s: index %d is negative or appears twice", i, g.UUID, g.Index)
		case g.MemoryMiB <= 0 || g.MemoryMiB > MaxMemoryMiB:
			return fmt.Errorf("mig[%d] %s: memoryMiB %d must be within 1..%d", i, g.UUID, g.MemoryMiB, MaxMemoryMiB)
		case g.SMs <= 0 || g.SMs > maxSMs:
			return fmt.Errorf("mig[%d] %s: sms %d must be within 1..%d", i, g.UUID, g.SMs, maxSMs)
		case len(g.Instances) > maxMIGInstances:
			return fmt.Errorf("mig[%d] %s: %d instances, more than %d", i, g.UUID, len(g.Instances), maxMIGInstances)
		}
		seenUUID[g.UUID], seenIndex[g.Index] = true, true
		for j, in := range g.Instances {
			switch {
			case in.UUID == "" || seenUUID[in.UUID]:
				return fmt.Errorf("mig[%d].instances[%d]: uuid %q is empty or appears twice", i, j, in.UUID)
			case in.Profile == "" || len(in.Profile) > maxProfileLen:
				return fmt.Errorf("mig[%d].instances[%d] %s: profile %q must be 1..%d bytes", i, j, in.UUID, in.Profile, maxProfileLen)
			case in.MemoryMiB <= 0 || in.MemoryMiB > g.MemoryMiB:
				return fmt.Errorf("mig[%d].instances[%d] %s: memoryMiB %d must be within 1..%d, its GPU's", i, j, in.UUID, in.MemoryMiB, g.MemoryMiB)
			case in.SMs <= 0 || in.SMs > g.SMs:
				return fmt.Errorf("mig[%d].instances[%d] %s: sms %d must be within 1..%d, its GPU's", i, j, in.UUID, in.SMs, g.SMs)
			case in.Start < 0 || in.Size <= 0 || in.Start+in.Size > maxMemSlices:
				return fmt.Errorf("mig[%d].instances[%d] %s: placement %d+%d must lie within 0..%d", i, j, in.UUID, in.Start, in.Size, maxMemSlices)
			}
			for _, o := range g.Instances[:j] {
				if in.placement().Overlaps(o.placement()) {
					return fmt.Errorf("mig[%d].instances[%d] %s: placement %d+%d overlaps %s's; each instance is a whole GPU instance", i, j, in.UUID, in.Start, in.Size, o.UUID)
				}
			}
			seenUUID[in.UUID] = true
		}
		if err := validatePossible(i, g, seenUUID); err != nil {
			return err
		}
	}
	return nil
}

// MIGRef is what a MIG instance, listed as a GPU of its own (Bookable),
// is part of: its GPU, that GPU's memory (what a percentage of memory is
// counted against), and the instance's profile.
type MIGRef struct {
	GPU          string
	GPUMemoryMiB int64
	Profile      string
	// OnDemand: a possible instance (MIGGPU.Possible), which the node
	// makes for the pod booked on it; Made, it has made it. Start and
	// Size are its placement, which booking it takes from the others.
	OnDemand, Made bool
	Start, Size    int
}

// Overlaps says whether r and o are placements on one GPU that share a
// memory slice.
func (r *MIGRef) Overlaps(o *MIGRef) bool {
	return r.GPU == o.GPU && mig.Span{Start: r.Start, Size: r.Size}.Overlaps(mig.Span{Start: o.Start, Size: o.Size})
}

// Bookable is every GPU of inv a leader books: the shared GPUs, then each
// MIG instance as a GPU of its own (its memory, its share of the parent's
// SMs as cores, split 1, the parent's index, NUMA node and health), with
// what each instance is part of by instance UUID (nil without MIG).
func (inv Inventory) Bookable() ([]GPU, map[string]*MIGRef) {
	if len(inv.MIG) == 0 {
		return inv.GPUs, nil
	}
	gpus := make([]GPU, len(inv.GPUs), len(inv.GPUs)+8*len(inv.MIG))
	copy(gpus, inv.GPUs)
	refs := map[string]*MIGRef{}
	for _, m := range inv.MIG {
		for _, in := range m.Instances {
			gpus = append(gpus, GPU{UUID: in.UUID, Index: m.Index, Model: m.Model + " MIG " + in.Profile, MemoryMiB: in.MemoryMiB,
				Cores: m.Cores(in), Split: 1, NUMA: m.NUMA, Healthy: m.Healthy})
			refs[in.UUID] = &MIGRef{GPU: m.UUID, GPUMemoryMiB: m.MemoryMiB, Profile: in.Profile}
		}
		for _, in := range m.Possible {
			gpus = append(gpus, GPU{UUID: in.UUID, Index: m.Index, Model: m.Model + " MIG " + in.Profile, MemoryMiB: in.MemoryMiB,
				Cores: m.Cores(in), Split: 1, NUMA: m.NUMA, Healthy: m.Healthy})
			refs[in.UUID] = &MIGRef{GPU: m.UUID, GPUMemoryMiB: m.MemoryMiB, Profile: in.Profile,
				OnDemand: true, Made: in.Made != "", Start: in.Start, Size: in.Size}
		}
	}
	return gpus, refs
}

// MIGParent is the GPU of the MIG device uuid that inv lists, made on
// demand or not; "" for none.
func (inv Inventory) MIGParent(uuid string) string {
	for _, g := range inv.MIG {
		for _, in := range g.Instances {
			if in.UUID == uuid {
				return g.UUID
			}
		}
		for _, in := range g.Possible {
			if in.Made == uuid {
				return g.UUID
			}
		}
	}
	return ""
}
