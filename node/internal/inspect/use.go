package inspect

import (
	"fmt"
	"io"
	"time"

	"github.com/vgpud/vgpud/protocol/inspectv1"
)

// renderUse prints the usage section.
func renderUse(w io.Writer, u *inspectv1.GPUUse) {
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
			if c.Claim != "" {
				slice += fmt.Sprintf(" (claim %s's, %d MiB used by all)", c.Claim, c.SharedMiB)
			}
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
