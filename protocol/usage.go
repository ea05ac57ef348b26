package protocol

import (
	"fmt"
	"time"
)

// NodeUsage is the value of AnnotationUsage on a node: what its latest
// sample of the GPUs' processes showed, for `vgpud inspect --cluster`.
// The node role writes it when it changes, at most every
// UsagePublishEvery; the books never read it.
type NodeUsage struct {
	Version  int      `json:"version"`
	Requires []string `json:"requires,omitempty"`
	// Mode is the node's --gpu-usage: off, report or enforce.
	Mode         string           `json:"mode"`
	Taken        time.Time        `json:"taken"`
	Containers   []ContainerUsage `json:"containers"`
	Unattributed []GPUMemory      `json:"unattributed,omitempty"`
}

// ContainerUsage is one container's use of one GPU against its slice.
type ContainerUsage struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	GPU       string `json:"gpu"`
	UsedMiB   int64  `json:"usedMiB"`
	SliceMiB  int64  `json:"sliceMiB"`
	// SMPercent is its processes' share of SM time; -1 where the driver
	// gave no sample.
	SMPercent int `json:"smPercent"`
	Cores     int `json:"cores"`
	Kills     int `json:"kills"` // processes killed for memory since the node role started
}

// GPUMemory is memory on a GPU that no granted container of the node holds.
type GPUMemory struct {
	GPU     string `json:"gpu"`
	UsedMiB int64  `json:"usedMiB"`
}

// Bounds of a NodeUsage: a node lists at most MaxUsageContainers
// container/GPU pairs (the annotation stays well inside its limit).
const (
	MaxUsageContainers = 512
	UsagePublishEvery  = 30 * time.Second
)

// EncodeUsage validates u and renders it as the annotation value.
func EncodeUsage(u NodeUsage) (string, error) {
	u.Version = Version
	if err := u.Validate(); err != nil {
		return "", err
	}
	return marshal(u, "usage")
}

// DecodeUsage parses and validates an AnnotationUsage value.
func DecodeUsage(s string) (NodeUsage, error) {
	var u NodeUsage
	if err := decode(s, &u); err != nil {
		return NodeUsage{}, fmt.Errorf("decode %s: %w", AnnotationUsage, err)
	}
	if err := u.Validate(); err != nil {
		return NodeUsage{}, fmt.Errorf("decode %s: %w", AnnotationUsage, err)
	}
	if len(u.Requires) == 0 {
		u.Requires = nil
	}
	return u, nil
}

// Validate reports the first thing that makes u unusable.
func (u NodeUsage) Validate() error {
	if err := checkVersion(u.Version, u.Requires); err != nil {
		return err
	}
	if len(u.Containers) > MaxUsageContainers {
		return fmt.Errorf("%d containers, over the %d a node lists", len(u.Containers), MaxUsageContainers)
	}
	for i, c := range u.Containers {
		if c.UsedMiB < 0 || c.SliceMiB < 0 || c.Kills < 0 || c.SMPercent < -1 || c.Cores < 0 {
			return fmt.Errorf("containers[%d]: negative use, slice, cores or kills", i)
		}
	}
	for i, g := range u.Unattributed {
		if g.UsedMiB < 0 {
			return fmt.Errorf("unattributed[%d]: negative memory", i)
		}
	}
	return nil
}
