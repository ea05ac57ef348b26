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
	"maps"
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
	// Holder is who held the PID when first seen (the enforcer sets it):
	// an orphan's memory stays charged to its pod's namespace.
	Holder Holder
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
	Slices map[string]Share
}

// Share is a container's part of one GPU.
type Share struct {
	MemoryBytes uint64
	Cores       int
	// Pool, where not "", names a share other containers hold too (a
	// DRA claim's device that several containers use, by its CDI name):
	// the containers naming the same pool on a GPU are held to
	// MemoryBytes together.
	Pool string
	// Claim names the pool's claim, "namespace/name", in what the node
	// says.
	Claim string
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
	// Pool and Claim are the share's (Share.Pool), "" for a slice of the
	// container's own; PoolBytes is what every container of the pool
	// holds on the GPU, Holders how many hold some.
	Pool, Claim string
	PoolBytes   uint64
	Holders     int
}

// Over reports whether the container holds more than its slice plus
// margin: with the other holders of its pool, where it has one.
func (u Use) Over(margin uint64) bool {
	return !u.Whole && u.Held() > u.LimitBytes+margin
}

// Held is what counts against the slice: the pool's, for a share.
func (u Use) Held() uint64 {
	if u.Pool != "" {
		return u.PoolBytes
	}
	return u.UsedBytes
}

// Kill is a process Decide would end: of a container's processes on a
// GPU where it is over its slice, the largest, and the next largest
// until what is left fits.
type Kill struct {
	Use    Use
	Victim Process
	// Full: the container was within its slice plus the margin, but the
	// GPU was full (its processes held more than its memory less the
	// reserve), so it was held to its slice.
	Full bool
}

// Outcome is what one sample shows and what to do about it.
type Outcome struct {
	Uses []Use
	// Kills is empty unless the mode is Enforce.
	Kills []Kill
	// Unattributed are processes no granted container of this node owns:
	// the host's, another runtime's, an exempt container's, a deleted
	// pod's memory still listed, or (where nodes share a PID namespace)
	// another node's. Reported, never killed.
	Unattributed []Process
	// Stuck are uses that stay over once every process of theirs that
	// may be killed is: what is over is listed under PIDs that ended (a
	// child or another process holds the descriptor). The enforcer ends
	// such a container whole (Enforcer.Step). Shown in every mode.
	Stuck []Use
	// Held is, per GPU the node serves, the bytes it holds beyond the
	// slices booked on it: unattributed memory and what containers hold
	// past their slices. The leader counts it as used.
	Held map[string]uint64
	// HeldBy is, of Held, what processes of a known pod opened, by GPU
	// and pod UID: an orphan's first holder's pod, or a container's
	// past its slice. Its pod's namespace is charged for it.
	HeldBy map[string]map[string]uint64
	// Full are the GPUs whose processes hold more than their memory less
	// the reserve even after the kills decided: the excess is held by
	// what vgpud may not end, or not yet.
	Full map[string]bool
}

// Rules are what a node does with a sample.
type Rules struct {
	Mode Mode
	// Margin is what a container may hold past its slice on a GPU before
	// it is over: room for CUDA contexts, which the slice does not count,
	// on a GPU that has room.
	Margin uint64
	// Reserve is the memory of each GPU its processes may not take
	// together: once they hold more than the GPU's memory less it, every
	// container above its slice is over, margin or not.
	Reserve uint64
}

// Decide attributes the sample's processes by owner (nil when no granted
// container owns the PID) and decides, under r, which processes to end:
//
//   - a container over its slice's memory plus the margin on a GPU loses
//     its largest processes there until what is left fits;
//   - on a full GPU (its processes hold more than its memory less the
//     reserve), containers above their slice lose theirs, largest excess
//     first, until the GPU fits or none is above its slice: nobody within
//     a slice is touched;
//   - an orphaned PID is never a victim: a container whose excess is
//     held by orphans alone is Stuck.
//
// A whole-GPU slice is never over; a GPU absent from the sample's
// MemoryBytes is not the node's to enforce.
func Decide(s Sample, owner func(pid int) *Container, r Rules) Outcome {
	v := Outcome{Held: map[string]uint64{}, HeldBy: map[string]map[string]uint64{}, Full: map[string]bool{}}
	type key struct{ id, gpu string }
	uses := map[key]*Use{}
	onGPU := map[string]uint64{} // every served GPU's listed memory
	for _, p := range s.Processes {
		c := owner(p.PID)
		// A GPU this node does not serve (excluded, or another device
		// plugin's) holds no slice of vgpud's: its processes are reported.
		_, served := s.MemoryBytes[p.GPU]
		if served {
			onGPU[p.GPU] += p.UsedBytes
		}
		if c == nil || !served {
			v.Unattributed = append(v.Unattributed, p)
			if served {
				v.Held[p.GPU] += p.UsedBytes
				if !p.Holder.Dead {
					v.heldBy(p.GPU, p.Holder.PodUID, p.UsedBytes)
				}
			}
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
			u = &Use{Container: c, GPU: p.GPU, LimitBytes: sl.MemoryBytes, Whole: total > 0 && sl.MemoryBytes >= total, Cores: sl.Cores, SMPercent: -1, Pool: sl.Pool, Claim: sl.Claim}
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

	plans := units(v.Uses)
	for i := range plans {
		p := &plans[i]
		if u := p.use; !u.Whole && u.UsedBytes > u.LimitBytes {
			v.Held[u.GPU] += u.UsedBytes - u.LimitBytes
			v.heldBy(u.GPU, p.payer().Container.PodUID, u.UsedBytes-u.LimitBytes)
		}
		if p.use.Over(r.Margin) {
			p.shrinkTo(p.use.LimitBytes + r.Margin)
		}
		p.overVictims = len(p.victims)
	}
	for _, gpu := range slices.Sorted(maps.Keys(onGPU)) {
		total := s.MemoryBytes[gpu]
		if total == 0 {
			continue // its size unknown: never full
		}
		room := total - min(r.Reserve, total)
		left := fullGPU(gpu, onGPU[gpu], room, plans)
		if r.Mode != Enforce {
			left = onGPU[gpu] // nothing is killed: full is what the GPU holds
		}
		// A whole-GPU slice's GPU is its alone: nobody else is placed
		// there, and what it holds is its own.
		if left > room && !wholeOn(v.Uses, gpu) {
			v.Full[gpu] = true
		}
	}
	for i := range plans {
		p := &plans[i]
		for j, victim := range p.victims {
			v.Kills = append(v.Kills, Kill{Use: p.holder(victim.PID), Victim: victim, Full: j >= p.overVictims})
		}
		if p.stuck {
			v.Stuck = append(v.Stuck, p.stuckUses()...)
		}
	}
	if r.Mode != Enforce {
		v.Kills = nil
	}
	return v
}

// heldBy adds b held on gpu to pod's part of it; "" is no pod's.
func (v *Outcome) heldBy(gpu, pod string, b uint64) {
	if pod == "" || b == 0 {
		return
	}
	if v.HeldBy[gpu] == nil {
		v.HeldBy[gpu] = map[string]uint64{}
	}
	v.HeldBy[gpu][pod] += b
}

// wholeOn reports whether some use of gpu is a whole-GPU slice.
func wholeOn(uses []Use, gpu string) bool {
	for _, u := range uses {
		if u.GPU == gpu && u.Whole {
			return true
		}
	}
	return false
}

// instanceOn is c's slice of a MIG instance of the GPU gpu, where it has
// one: the whole instance, which its hardware holds it to, every core of
// it. A zero Slice where it has none.
func (c *Container) instanceOn(gpu string, parents map[string]string) Share {
	for uuid, sl := range c.Slices {
		if parents[uuid] == gpu {
			return Share{MemoryBytes: sl.MemoryBytes, Cores: 100}
		}
	}
	return Share{}
}
