// Package usage holds each container to its slice of GPU memory from
// outside its processes: the node samples what NVML says every process
// on each GPU uses, attributes each process to the container the runtime
// hook granted a slice, and, where the node enforces, kills the largest
// process of a container over its slice. Decide is the pure rule; the
// sampling, the attribution and the kill are the parts around it.
package usage

import (
	"cmp"
	"fmt"
	"slices"
)

// Mode is what a node does with what it measures.
type Mode int

const (
	// Off samples nothing.
	Off Mode = iota
	// Report measures and shows every container's use, and kills nothing.
	Report
	// Enforce also kills the largest process of a container over its
	// slice's memory on a GPU.
	Enforce
)

// Modes lists the accepted values, for flags and errors.
var Modes = []string{"off", "report", "enforce"}

func (m Mode) String() string { return Modes[m] }

// ParseMode reads a --gpu-usage value.
func ParseMode(s string) (Mode, error) {
	if i := slices.Index(Modes, s); i >= 0 {
		return Mode(i), nil
	}
	return Off, fmt.Errorf("%q is not a mode: want one of %v", s, Modes)
}

// Process is one process on one GPU as NVML lists it.
type Process struct {
	GPU       string // UUID
	PID       int
	UsedBytes uint64
	// SMPercent is the process's share of the GPU's SM time over the
	// last sample period; -1 where the driver did not say.
	SMPercent int
	// Orphaned: the PID no longer runs the process that opened the GPU
	// (it ended and another holds its descriptor, it is a zombie, or the
	// PID was reused). Charged to the container that held it first,
	// never a victim.
	Orphaned bool
	// Start is when the PID's process started, as first seen (the
	// enforcer sets it): a kill checks it again once the process is held.
	Start uint64
}

// Container is a container the runtime hook granted a slice, as the
// runtime named it.
type Container struct {
	ID                     string // the runtime's container ID
	Namespace, Pod, PodUID string
	Name                   string
	// Slices are its parts of GPUs, by UUID. A slice that oversubscribes
	// the GPU (CUDA_OVERSUBSCRIBE) is measured against its memory all the
	// same: the GPU holds only what it has.
	Slices map[string]Slice
}

// Slice is a container's part of one GPU.
type Slice struct {
	MemoryBytes uint64
	Cores       int
}

// Sample is one read of the node's GPUs: every process on them, and each
// GPU's memory.
type Sample struct {
	Processes []Process
	// MemoryBytes is each GPU's physical memory, by UUID: a slice of all
	// of it (or more, where the node oversubscribes) is a whole GPU.
	MemoryBytes map[string]uint64
	// Parents are the MIG instances' GPUs, by instance UUID: NVML lists
	// an instance's processes on its GPU.
	Parents map[string]string
}

// Use is one container's use of one GPU in one sample.
type Use struct {
	Container  *Container
	GPU        string
	UsedBytes  uint64
	LimitBytes uint64 // the slice's memory; 0 on a GPU it was not granted
	// Whole is a slice of all the GPU's memory: never over.
	Whole bool
	// SMPercent sums the processes' shares; -1 where the driver said none.
	SMPercent int
	Cores     int // the slice's gpucores, to read SMPercent against
	Processes []Process
}

// Over reports whether the container holds more than its slice plus margin.
func (u Use) Over(margin uint64) bool {
	return !u.Whole && u.UsedBytes > u.LimitBytes+margin
}

// Kill is a process Decide would end: of a container's processes on a
// GPU where it is over its slice, the largest, and the next largest
// until what is left fits.
type Kill struct {
	Use    Use
	Victim Process
}

// Verdict is what one sample shows and what to do about it.
type Verdict struct {
	Uses []Use
	// Kills is empty unless the mode is Enforce.
	Kills []Kill
	// Unattributed are processes no granted container of this node owns:
	// the host's, another runtime's, an exempt container's, or (where
	// nodes share a PID namespace) another node's. Reported, never killed.
	Unattributed []Process
}

// Decide attributes the sample's processes by owner (nil when no granted
// container owns the PID) and decides, under mode, which processes to
// end: for each container over its slice's memory plus margin on a GPU,
// its largest processes there until what is left fits. A whole-GPU slice
// is never over; a GPU absent from the sample's MemoryBytes is not the
// node's to enforce.
func Decide(s Sample, owner func(pid int) *Container, mode Mode, margin uint64) Verdict {
	var v Verdict
	type key struct{ id, gpu string }
	uses := map[key]*Use{}
	for _, p := range s.Processes {
		c := owner(p.PID)
		// A GPU this node does not serve (excluded, or another device
		// plugin's) holds no slice of vgpud's: its processes are reported.
		if _, served := s.MemoryBytes[p.GPU]; c == nil || !served {
			v.Unattributed = append(v.Unattributed, p)
			continue
		}
		k := key{c.ID, p.GPU}
		u := uses[k]
		if u == nil {
			sl, ok := c.Slices[p.GPU]
			if !ok {
				sl = c.instanceOn(p.GPU, s.Parents)
			}
			total := s.MemoryBytes[p.GPU]
			u = &Use{Container: c, GPU: p.GPU, LimitBytes: sl.MemoryBytes, Whole: total > 0 && sl.MemoryBytes >= total, Cores: sl.Cores, SMPercent: -1}
			uses[k] = u
		}
		u.UsedBytes += p.UsedBytes
		if p.SMPercent >= 0 {
			u.SMPercent = max(u.SMPercent, 0) + p.SMPercent
		}
		u.Processes = append(u.Processes, p)
	}
	for _, u := range uses {
		v.Uses = append(v.Uses, *u)
	}
	// One order whatever the map's: by pod, container, GPU.
	slices.SortFunc(v.Uses, func(a, b Use) int {
		return cmp.Or(cmp.Compare(a.Container.Namespace, b.Container.Namespace), cmp.Compare(a.Container.Pod, b.Container.Pod),
			cmp.Compare(a.Container.Name, b.Container.Name), cmp.Compare(a.Container.ID, b.Container.ID), cmp.Compare(a.GPU, b.GPU))
	})
	slices.SortFunc(v.Unattributed, func(a, b Process) int { return cmp.Or(cmp.Compare(a.GPU, b.GPU), cmp.Compare(a.PID, b.PID)) })
	if mode != Enforce {
		return v
	}
	for _, u := range v.Uses {
		if !u.Over(margin) {
			continue
		}
		// The largest first; of equals, the newest PID (most likely the one
		// that just grew), so the choice is the same every time. Then the
		// next, until what is left fits: many small processes do not
		// outrun one kill a period.
		procs := slices.SortedFunc(slices.Values(u.Processes), func(a, b Process) int {
			return cmp.Or(cmp.Compare(b.UsedBytes, a.UsedBytes), cmp.Compare(b.PID, a.PID))
		})
		left := u.UsedBytes
		for _, p := range procs {
			if left <= u.LimitBytes+margin {
				break
			}
			if p.Orphaned {
				continue
			}
			v.Kills = append(v.Kills, Kill{Use: u, Victim: p})
			left -= p.UsedBytes
		}
	}
	return v
}

// instanceOn is c's slice of a MIG instance of the GPU gpu, where it has
// one: the whole instance, which its hardware holds it to, every core of
// it. A zero Slice where it has none.
func (c *Container) instanceOn(gpu string, parents map[string]string) Slice {
	for uuid, sl := range c.Slices {
		if parents[uuid] == gpu {
			return Slice{MemoryBytes: sl.MemoryBytes, Cores: 100}
		}
	}
	return Slice{}
}
