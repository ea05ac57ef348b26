package protocol

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// NodeUsage is the value of wellknown.AnnotationUsage on a node: what its latest
// sample of the GPUs' processes showed, for `vgpud inspect --cluster`.
// The node role writes it when it changes, at most every
// UsagePublishEvery. The books read Held alone: what the GPU holds that
// no booking covers is not free, whatever the books say.
type NodeUsage struct {
	Version  int      `json:"version"`
	Requires []string `json:"requires,omitempty"`
	// Mode is the node's --gpu-usage: off, report or enforce.
	Mode         string           `json:"mode"`
	Taken        time.Time        `json:"taken"`
	Containers   []ContainerUsage `json:"containers"`
	Unattributed []GPUMemory      `json:"unattributed,omitempty"`
	// Omitted counts the containers left out to keep the value within
	// MaxUsageBytes, the smallest users first.
	Omitted int `json:"omitted,omitempty"`
	// Held is, per GPU that has any, the memory it holds beyond the
	// slices booked on it: what no granted container of the node holds
	// (the host's, a deleted pod's still listed, a PID first seen dead),
	// and what containers hold past their slices. The leader counts it
	// as used. Absent from an older node: nothing held.
	Held []GPUHeld `json:"held,omitempty"`
}

// GPUHeld is memory one GPU holds beyond its bookings.
type GPUHeld struct {
	GPU string `json:"gpu"`
	MiB int64  `json:"mib"`
	// Full: the GPU's processes hold more than its memory less the
	// node's reserve, and what is over is held by processes vgpud may
	// not end; nothing is placed there until the driver frees it.
	Full bool `json:"full,omitempty"`
	// Pods are, of MiB, what processes of pods the node granted opened
	// (a deleted pod's still listed, or past a live pod's slice), by pod
	// UID, largest first, at most MaxHeldPods. The leader charges each to
	// the namespace its own books hold for that pod on this GPU, and
	// none where they hold none: a node names pods, never namespaces.
	Pods []HeldPod `json:"pods,omitempty"`
}

// HeldPod is memory a GPU holds that a pod's process opened.
type HeldPod struct {
	UID string `json:"uid"`
	MiB int64  `json:"mib"`
}

// MaxHeldPods bounds the pods a GPUHeld names.
const MaxHeldPods = 16

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
	// Over says it held more than its slice plus the node's margin (the
	// MiB are rounded; this is not).
	Over bool `json:"over,omitempty"`
	// Claim, for a DRA claim's share several containers hold together,
	// is the claim's "namespace/name", and SharedMiB what they all hold
	// on the GPU: the slice, and Over, are theirs together.
	Claim     string `json:"claim,omitempty"`
	SharedMiB int64  `json:"sharedMiB,omitempty"`
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
	// MaxUsageBytes keeps the annotation a small share of the 256 KiB a
	// Node's annotations may take together.
	MaxUsageBytes     = 32 << 10
	UsagePublishEvery = 30 * time.Second
)

// EncodeUsage validates u and renders it as the annotation value.
func EncodeUsage(u NodeUsage) (string, error) {
	u.Version = Version
	if err := u.Validate(); err != nil {
		return "", err
	}
	return marshal(u, "usage")
}

// DecodeUsage parses and validates a wellknown.AnnotationUsage value.
func DecodeUsage(s string) (NodeUsage, error) {
	var u NodeUsage
	if err := decode(s, &u); err != nil {
		return NodeUsage{}, fmt.Errorf("decode %s: %w", wellknown.AnnotationUsage, err)
	}
	if err := u.Validate(); err != nil {
		return NodeUsage{}, fmt.Errorf("decode %s: %w", wellknown.AnnotationUsage, err)
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
	if !slices.Contains([]string{"off", "report", "enforce"}, u.Mode) {
		return fmt.Errorf("mode %q: want off, report or enforce", u.Mode)
	}
	for i, c := range u.Containers {
		if c.UsedMiB < 0 || c.SliceMiB < 0 || c.Kills < 0 || c.SMPercent < -1 || c.Cores < 0 || c.SharedMiB < 0 {
			return fmt.Errorf("containers[%d]: negative use, slice, cores or kills", i)
		}
		// Shown in a terminal by inspect --cluster: no control characters.
		for _, text := range []string{c.Namespace, c.Pod, c.Container, c.GPU} {
			if strings.IndexFunc(text, unicode.IsControl) >= 0 || len(text) > 253 {
				return fmt.Errorf("containers[%d]: a name over 253 bytes or with a control character", i)
			}
		}
		// A claim is "namespace/name": 63 and 253 bytes at most.
		if strings.IndexFunc(c.Claim, unicode.IsControl) >= 0 || len(c.Claim) > 63+1+253 {
			return fmt.Errorf("containers[%d]: a claim name over %d bytes or with a control character", i, 63+1+253)
		}
	}
	for i, g := range u.Unattributed {
		if g.UsedMiB < 0 || strings.IndexFunc(g.GPU, unicode.IsControl) >= 0 || len(g.GPU) > 253 {
			return fmt.Errorf("unattributed[%d]: negative memory, or a bad GPU name", i)
		}
	}
	if len(u.Held) > MaxGPUsPerNode*8 {
		return fmt.Errorf("%d held entries, over the %d a node lists", len(u.Held), MaxGPUsPerNode*8)
	}
	for i, h := range u.Held {
		if h.MiB < 0 || h.MiB > MaxMemoryMiB || strings.IndexFunc(h.GPU, unicode.IsControl) >= 0 || len(h.GPU) > 253 {
			return fmt.Errorf("held[%d]: memory outside 0..%d MiB, or a bad GPU name", i, MaxMemoryMiB)
		}
		if len(h.Pods) > MaxHeldPods {
			return fmt.Errorf("held[%d]: %d pods, over the %d a GPU names", i, len(h.Pods), MaxHeldPods)
		}
		for j, p := range h.Pods {
			if p.MiB < 0 || p.MiB > h.MiB || p.UID == "" || len(p.UID) > 64 || strings.IndexFunc(p.UID, unicode.IsControl) >= 0 {
				return fmt.Errorf("held[%d].pods[%d]: memory outside 0..%d MiB (the GPU's held), or a bad pod UID", i, j, h.MiB)
			}
		}
	}
	if u.Omitted < 0 {
		return fmt.Errorf("omitted %d: negative", u.Omitted)
	}
	return nil
}

// RuntimeCheck is the vgpud.io/runtime-check annotation: whether the
// node's container runtime fails closed without vgpud (node/internal/
// preflight), for `vgpud inspect --cluster`. The books never read it.
type RuntimeCheck struct {
	Result  string `json:"result"` // RuntimeFailsClosed, RuntimeFailsOpen or RuntimeUnknown
	Runtime string `json:"runtime"`
	// Scope is what fails closed: RuntimeScopeAll or
	// RuntimeScopeGPUPods; "" where nothing does, and from a node role
	// older than scopes (every container then).
	Scope    string   `json:"scope,omitempty"`
	Problems []string `json:"problems,omitempty"`
}

// RuntimeCheck's results.
const (
	RuntimeFailsClosed = "fails-closed" // no container is created without vgpud's hook
	RuntimeFailsOpen   = "fails-open"   // containers are created while vgpud is away
	RuntimeUnknown     = "unknown"      // the configuration could not be read, or is not yet run
)

// RuntimeCheck's scopes: what the runtime creates no container of while
// vgpud's hook is away.
const (
	// RuntimeScopeAll: no container at all, but pods annotated
	// vgpud.io/runtime-hook-optional (the validator requires vgpud).
	RuntimeScopeAll = "all"
	// RuntimeScopeGPUPods: none of a pod that could reach a GPU, which
	// admission marks with NRI's required-plugins annotation; other pods
	// start while vgpud is down.
	RuntimeScopeGPUPods = "gpu-pods"
)
