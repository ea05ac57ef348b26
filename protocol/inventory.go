package protocol

import "fmt"

// Inventory is the value of AnnotationGPUs on a node.
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
}

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

// DecodeInventory parses and validates an AnnotationGPUs value.
func DecodeInventory(s string) (Inventory, error) {
	var inv Inventory
	if err := decode(s, &inv); err != nil {
		return Inventory{}, fmt.Errorf("decode %s: %w", AnnotationGPUs, err)
	}
	if err := inv.Validate(); err != nil {
		return Inventory{}, fmt.Errorf("decode %s: %w", AnnotationGPUs, err)
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
