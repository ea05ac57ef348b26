package protocol

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Assignment is the value of wellknown.AnnotationAssignment on a pod: which GPUs, and
// how much of each, every GPU-using container gets. Containers that use no
// GPU are absent.
type Assignment struct {
	Version int `json:"version"`
	// Requires names the features a reader must understand to use this
	// value at all (skew.go).
	Requires   []string              `json:"requires,omitempty"`
	Node       string                `json:"node"`
	Containers []ContainerAssignment `json:"containers"`
}

// ContainerAssignment is one container's share.
type ContainerAssignment struct {
	Name string     `json:"name"`
	GPUs []GPUSlice `json:"gpus"`
}

// GPUSlice is the part of one physical GPU a container gets.
type GPUSlice struct {
	UUID      string `json:"uuid"`
	MemoryMiB int64  `json:"memoryMiB"`
	Cores     int    `json:"cores"`
	// Exclusive: nobody else joins the GPU while this slice holds it (the
	// mutex policy), though the slice is only what it names. A slice with
	// every core is exclusive without it. A reader that ignored it would
	// let others join, so an assignment with it requires FeatureMutex.
	Exclusive bool `json:"exclusive,omitempty"`
	// MIG: UUID is a MIG instance (MIGInstance), held whole; MemoryMiB
	// and Cores are what it takes from its parent GPU. An assignment with
	// it requires FeatureMIG.
	MIG bool `json:"mig,omitempty"`
	// Make: UUID names a possible instance (OnDemandID), which the node
	// makes for the container and hands it; MIG is set too. An
	// assignment with it requires FeatureMIGOnDemand.
	Make bool `json:"make,omitempty"`
}

// GPUs are the UUIDs a's containers hold, each once, in order.
func (a Assignment) GPUs() []string {
	var out []string
	for _, c := range a.Containers {
		for _, g := range c.GPUs {
			if !slices.Contains(out, g.UUID) {
				out = append(out, g.UUID)
			}
		}
	}
	return out
}

// HoldsAlone reports whether some slice of a holds its GPU by the mutex
// policy.
func (a Assignment) HoldsAlone() bool {
	for _, c := range a.Containers {
		for _, g := range c.GPUs {
			if g.Exclusive {
				return true
			}
		}
	}
	return false
}

// Makes reports whether some slice of a is an instance the node makes.
func (a Assignment) Makes() bool {
	return slices.ContainsFunc(a.Containers, ContainerAssignment.Makes)
}

// Makes reports whether some slice of c is an instance the node makes.
func (c ContainerAssignment) Makes() bool {
	return slices.ContainsFunc(c.GPUs, func(s GPUSlice) bool { return s.Make })
}

// HasMIG reports whether some slice of a is a MIG instance.
func (a Assignment) HasMIG() bool {
	for _, c := range a.Containers {
		for _, g := range c.GPUs {
			if g.MIG {
				return true
			}
		}
	}
	return false
}

// Container returns the named container's assignment.
func (a Assignment) Container(name string) (ContainerAssignment, bool) {
	for _, c := range a.Containers {
		if c.Name == name {
			return c, true
		}
	}
	return ContainerAssignment{}, false
}

// EncodeAssignment validates a and renders it as the annotation value.
func EncodeAssignment(a Assignment) (string, error) {
	a.Version = Version
	if a.HoldsAlone() && !slices.Contains(a.Requires, FeatureMutex) {
		a.Requires = append(slices.Clone(a.Requires), FeatureMutex)
	}
	if a.HasMIG() && !slices.Contains(a.Requires, FeatureMIG) {
		a.Requires = append(slices.Clone(a.Requires), FeatureMIG)
	}
	if a.Makes() && !slices.Contains(a.Requires, FeatureMIGOnDemand) {
		a.Requires = append(slices.Clone(a.Requires), FeatureMIGOnDemand)
	}
	if err := a.Validate(); err != nil {
		return "", err
	}
	return marshal(a, "assignment")
}

// DecodeAssignment parses and validates a wellknown.AnnotationAssignment value.
func DecodeAssignment(s string) (Assignment, error) {
	var a Assignment
	if err := decode(s, &a); err != nil {
		return Assignment{}, fmt.Errorf("decode %s: %w", wellknown.AnnotationAssignment, err)
	}
	if err := a.Validate(); err != nil {
		return Assignment{}, fmt.Errorf("decode %s: %w", wellknown.AnnotationAssignment, err)
	}
	if len(a.Requires) == 0 {
		a.Requires = nil // "requires": [] says what its absence says
	}
	return a, nil
}

// Validate reports the first thing that makes a unusable.
func (a Assignment) Validate() error {
	if err := checkVersion(a.Version, a.Requires); err != nil {
		return err
	}
	if strings.TrimSpace(a.Node) == "" {
		return fmt.Errorf("node is empty")
	}
	names := make(map[string]bool, len(a.Containers))
	for i, c := range a.Containers {
		if c.Name == "" {
			return fmt.Errorf("containers[%d]: name is empty", i)
		}
		if names[c.Name] {
			return fmt.Errorf("containers[%d]: container %q appears twice", i, c.Name)
		}
		names[c.Name] = true
		if len(c.GPUs) == 0 || len(c.GPUs) > MaxGPUsPerContainer {
			return fmt.Errorf("container %q: %d gpus; want 1..%d", c.Name, len(c.GPUs), MaxGPUsPerContainer)
		}
		uuids := make(map[string]bool, len(c.GPUs))
		for j, g := range c.GPUs {
			switch {
			case g.UUID == "":
				return fmt.Errorf("container %q gpus[%d]: uuid is empty", c.Name, j)
			case uuids[g.UUID]:
				return fmt.Errorf("container %q: gpu %s appears twice", c.Name, g.UUID)
			case g.MemoryMiB <= 0 || g.MemoryMiB > MaxMemoryMiB:
				// Bounded so that summing any pod's slices cannot overflow.
				return fmt.Errorf("container %q gpu %s: memoryMiB %d must be within 1..%d", c.Name, g.UUID, g.MemoryMiB, MaxMemoryMiB)
			case g.Cores < 0 || g.Cores > 100:
				return fmt.Errorf("container %q gpu %s: cores %d must be within 0..100", c.Name, g.UUID, g.Cores)
			case g.Make != (g.MIG && IsOnDemandID(g.UUID)):
				return fmt.Errorf("container %q gpu %s: make is set exactly for a MIG instance named %s...", c.Name, g.UUID, OnDemandPrefix)
			}
			uuids[g.UUID] = true
		}
	}
	return nil
}

// CheckSlices reports the first slice of containers that a node's GPUs
// cannot hold: a GPU the node does not have, or more memory than the GPU
// advertises (memory scaling applied). memoryOf gives a GPU's advertised
// memory, false for a GPU the node does not have. Only vgpud's bind writes
// assignments (the apiserver refuses them from anyone else); the leader's
// books and the node's Allocate both check again, so a forged one is
// neither booked nor handed to a container.
func CheckSlices(containers []ContainerAssignment, memoryOf func(uuid string) (int64, bool)) error {
	for _, c := range containers {
		for _, s := range c.GPUs {
			mem, ok := memoryOf(s.UUID)
			switch {
			case !ok:
				return fmt.Errorf("container %q names GPU %s, which the node does not have", c.Name, s.UUID)
			case s.MemoryMiB > mem:
				return fmt.Errorf("container %q asks %d MiB of GPU %s, which has %d MiB", c.Name, s.MemoryMiB, s.UUID, mem)
			}
		}
	}
	return nil
}
