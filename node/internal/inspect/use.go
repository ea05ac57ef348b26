package inspect

import (
	"fmt"
	"io"
	"time"
)

// GPUUse is what the node's latest sample of its GPUs' processes showed
// (--gpu-usage): each container's use against its slice, and what no
// granted container owns.
type GPUUse struct {
	Mode         string         `json:"mode"`
	Taken        time.Time      `json:"taken"`
	Containers   []ContainerUse `json:"containers"`
	Unattributed []ProcessUse   `json:"unattributed"`
	// GPUs are, per GPU with any, the memory it holds beyond the slices
	// booked on it (what the leader counts as used) and whether it is
	// full: its processes hold more than its memory less the reserve,
	// and vgpud may not end what is over.
	GPUs []HeldOnGPU `json:"gpus,omitempty"`
	// Ends are containers ended whole for memory listed under PIDs that
	// had ended, whose memory is still listed.
	Ends []UsageEnd `json:"ends,omitempty"`
}

// HeldOnGPU is memory one GPU holds beyond its bookings.
type HeldOnGPU struct {
	GPU     string `json:"gpu"`
	HeldMiB uint64 `json:"heldMiB"`
	Full    bool   `json:"full,omitempty"`
	// Pods are, of HeldMiB, what a known pod's processes opened: charged
	// to its namespace.
	Pods []PodHeld `json:"pods,omitempty"`
}

// PodHeld is memory a GPU holds that a pod's process opened.
type PodHeld struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	MiB       uint64 `json:"mib"`
}

// UsageEnd is how far the node went to free a container's memory.
type UsageEnd struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	GPU       string `json:"gpu"`
	Stage     string `json:"stage"`
}

// ContainerUse is one container's use of one GPU.
type ContainerUse struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	GPU       string `json:"gpu"`
	UsedMiB   uint64 `json:"usedMiB"`
	SliceMiB  uint64 `json:"sliceMiB"`
	Whole     bool   `json:"whole,omitempty"`
	Over      bool   `json:"over,omitempty"` // past its slice plus the margin
	// Stuck: over, with only PIDs that ended left to hold it (a child or
	// another process keeps the descriptor): the container is ended whole.
	Stuck bool `json:"stuck,omitempty"`
	// SMPercent is its processes' share of SM time; -1 where the driver
	// gave no sample. Cores is its gpucores, to read it against.
	SMPercent int `json:"smPercent"`
	Cores     int `json:"cores"`
	Processes int `json:"processes"`
	Kills     int `json:"kills"` // processes killed for memory, since vgpud started
}

// ProcessUse is a process on a GPU that no granted container owns.
type ProcessUse struct {
	GPU     string `json:"gpu"`
	PID     int    `json:"pid"`
	UsedMiB uint64 `json:"usedMiB"`
	// Orphaned: the PID no longer runs what opened the GPU. Namespace and
	// Pod name who held it first, where a pod did: the memory stays
	// charged to that namespace until the driver frees it.
	Orphaned  bool   `json:"orphaned,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
}

// renderUse prints the usage section.
func renderUse(w io.Writer, u *GPUUse) {
	fmt.Fprintln(w)
	if u.Mode == "off" {
		fmt.Fprintln(w, "GPU usage not sampled (--gpu-usage=off)")
		return
	}
	if u.Taken.IsZero() {
		fmt.Fprintf(w, "GPU usage (%s): no sample yet\n", u.Mode)
		return
	}
	fmt.Fprintf(w, "GPU usage (%s), sampled at %s\n", u.Mode, u.Taken.Format(time.TimeOnly))
	if len(u.Containers) > 0 {
		fmt.Fprintln(w, "POD\tCONTAINER\tGPU\tUSED MiB\tSLICE MiB\tSM %\tCORES %\tPROCS\tKILLS")
		for _, c := range u.Containers {
			slice := fmt.Sprint(c.SliceMiB)
			switch {
			case c.Whole:
				slice += " (whole GPU)"
			case c.Stuck:
				slice += " OVER (held by ended PIDs)"
			case c.Over:
				slice += " OVER"
			}
			sm := "-"
			if c.SMPercent >= 0 {
				sm = fmt.Sprint(c.SMPercent)
			}
			fmt.Fprintf(w, "%s/%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%d\n", c.Namespace, c.Pod, c.Container, short(c.GPU), c.UsedMiB, slice, sm, c.Cores, c.Processes, c.Kills)
		}
	}
	for _, p := range u.Unattributed {
		switch {
		case p.Namespace != "":
			fmt.Fprintf(w, "orphaned\tPID %d\t%s\t%d\t(first held by %s/%s, gone: charged to namespace %s until the driver frees it)\n", p.PID, short(p.GPU), p.UsedMiB, p.Namespace, p.Pod, p.Namespace)
		case p.Orphaned:
			fmt.Fprintf(w, "orphaned\tPID %d\t%s\t%d\t(first seen after its process ended: charged to nobody, counted as held)\n", p.PID, short(p.GPU), p.UsedMiB)
		default:
			fmt.Fprintf(w, "unattributed\tPID %d\t%s\t%d\t(no container vgpud granted on this node: reported, never killed)\n", p.PID, short(p.GPU), p.UsedMiB)
		}
	}
	for _, e := range u.Ends {
		fmt.Fprintf(w, "ended\t%s/%s\t%s\t%s\t(memory listed under PIDs that ended)\n", e.Namespace, e.Pod, e.Container, e.Stage)
	}
	for _, g := range u.GPUs {
		full := ""
		if g.Full {
			full = "; FULL: its processes hold more than its memory less the reserve, held by what vgpud may not end"
		}
		fmt.Fprintf(w, "GPU %s holds %d MiB beyond its bookings, which the leader counts as used%s\n", short(g.GPU), g.HeldMiB, full)
	}
	if len(u.Containers) == 0 && len(u.Unattributed) == 0 {
		fmt.Fprintln(w, "no processes on the GPUs")
	}
}
