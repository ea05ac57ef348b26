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
	Unattributed []Process      `json:"unattributed"`
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
	// SMPercent is its processes' share of SM time; -1 where the driver
	// gave no sample. Cores is its gpucores, to read it against.
	SMPercent int `json:"smPercent"`
	Cores     int `json:"cores"`
	Processes int `json:"processes"`
	Kills     int `json:"kills"` // processes killed for memory, since vgpud started
}

// Process is a process on a GPU that no granted container owns.
type Process struct {
	GPU     string `json:"gpu"`
	PID     int    `json:"pid"`
	UsedMiB uint64 `json:"usedMiB"`
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
		fmt.Fprintf(w, "unattributed\tPID %d\t%s\t%d\t(no container vgpud granted on this node: reported, never killed)\n", p.PID, short(p.GPU), p.UsedMiB)
	}
	if len(u.Containers) == 0 && len(u.Unattributed) == 0 {
		fmt.Fprintln(w, "no processes on the GPUs")
	}
}
