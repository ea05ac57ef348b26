package clusterview

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/inspectv1"
)

// Render prints v as the tables `kubectl vgpud` shows; wide adds each
// GPU's UUID and how its node tells which pod a container is (-o wide).
func Render(w io.Writer, v inspectv1.ClusterView, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "NODE\tGPU\tUUID\tMODEL\tMEMORY MiB\tFREE MiB\tCORES %\tSLICES\tHEALTH\tIDENTITY\tPODS")
	} else {
		fmt.Fprintln(tw, "NODE\tGPU\tMODEL\tMEMORY MiB\tFREE MiB\tCORES %\tSLICES\tHEALTH\tPODS")
	}
	for _, n := range v.Nodes {
		name := n.Name
		if n.Plugin != "" && n.Plugin != "serving" {
			name += " (" + n.Plugin + ")"
		}
		if r := n.Runtime; r != nil && r.Result != protocol.RuntimeFailsClosed {
			name += " (runtime " + strings.ToUpper(r.Result) + ")"
		}
		for _, g := range n.GPUs {
			holders := g.Pods
			for _, c := range g.Claims {
				holders = append(holders[:len(holders):len(holders)], "claim "+c)
			}
			health := "healthy"
			if !g.Healthy {
				health = "UNHEALTHY"
			}
			if g.Cordoned {
				health += ",cordoned"
			}
			if g.Full {
				health += ",full"
			}
			free := fmt.Sprint(g.MemoryMiB - g.MemoryUsedMiB - g.HeldMiB)
			if g.Exclusive {
				free = "0"
			}
			if g.HeldMiB > 0 {
				free += fmt.Sprintf(" (%d held)", g.HeldMiB)
			}
			if wide {
				identity := n.Identity
				if identity == "" {
					identity = "-"
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d/%d\t%s\t%d/%d\t%d/%d\t%s\t%s\t%s\n", name, g.Index, g.UUID, g.Model, g.MemoryUsedMiB, g.MemoryMiB, free,
					g.CoresUsed, g.Cores, g.SlotsUsed, g.Slots, health, identity, strings.Join(holders, ", "))
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d/%d\t%s\t%d/%d\t%d/%d\t%s\t%s\n", name, g.Index, g.Model, g.MemoryUsedMiB, g.MemoryMiB, free,
				g.CoresUsed, g.Cores, g.SlotsUsed, g.Slots, health, strings.Join(holders, ", "))
		}
	}
	if len(v.Nodes) == 0 {
		switch {
		case v.Namespace != "":
			fmt.Fprintf(tw, "no GPU holds a pod of namespace %s\n", v.Namespace)
		case v.Node != "":
			fmt.Fprintf(tw, "node %s has no vgpud inventory (vgpud.io/gpus)\n", v.Node)
		default:
			fmt.Fprintln(tw, "no node has vgpud's inventory (vgpud.io/gpus)")
		}
	}
	renderRuntime(tw, v.Nodes)
	renderUse(tw, v.Nodes)
	if v.Node == "" {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "NAMESPACE\tGPUMEM MiB CHARGED\tLEFT\tGPUCORES CHARGED\tLEFT")
		for _, ns := range v.Namespaces {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\n", ns.Name, ns.MemoryUsedMiB, left(ns.MemoryLimit, ns.MemoryUsedMiB), ns.CoresUsed, left(ns.CoresLimit, int64(ns.CoresUsed)))
		}
	}
	if len(v.HAMi) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "BOOKED FROM HAMI'S RECORD\tNODE\tAGE\tCREATED\tGPUS")
		for _, r := range v.HAMi {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Pod, r.Node, age(v.At, r.Created.Time), r.Created.UTC().Format(time.RFC3339), strings.Join(r.Slices, ", "))
		}
	}
	for _, p := range v.Problems {
		fmt.Fprintf(tw, "\nnot booked: %s", p)
	}
	if len(v.Problems) > 0 {
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// age is how long before at t was, the way kubectl shows it.
func age(at, t time.Time) string {
	if t.IsZero() || at.IsZero() {
		return "-"
	}
	return duration.HumanDuration(at.Sub(t))
}

// left is what a limit leaves, "-" without one.
func left(limit *int64, used int64) string {
	if limit == nil {
		return "-"
	}
	return fmt.Sprintf("%d of %d", *limit-used, *limit)
}

// renderUse prints what each node last published of its GPUs' processes.
func renderUse(w io.Writer, nodes []inspectv1.NodeView) {
	var rows []string
	for _, n := range nodes {
		if n.Use == nil {
			continue
		}
		for _, c := range n.Use.Containers {
			sm := "-"
			if c.SMPercent >= 0 {
				sm = fmt.Sprint(c.SMPercent)
			}
			over := ""
			if c.Claim != "" {
				over = fmt.Sprintf(" (claim %s's, %d used by all)", c.Claim, c.SharedMiB)
			}
			if c.Over {
				over += " OVER"
			}
			rows = append(rows, fmt.Sprintf("%s (%s)\t%s/%s\t%s\t%s\t%d/%d%s\t%s/%d\t%d", n.Name, n.Use.Mode, c.Namespace, c.Pod, c.Container, shortUUID(c.GPU), c.UsedMiB, c.SliceMiB, over, sm, c.Cores, c.Kills))
		}
		if n.Use.Omitted > 0 {
			rows = append(rows, fmt.Sprintf("%s (%s)\t%d more containers not published\t\t\t\t\t", n.Name, n.Use.Mode, n.Use.Omitted))
		}
		for _, g := range n.Use.Unattributed {
			rows = append(rows, fmt.Sprintf("%s (%s)\tunattributed\t-\t%s\t%d/-\t-\t-", n.Name, n.Use.Mode, shortUUID(g.GPU), g.UsedMiB))
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "NODE (GPU USAGE)\tPOD\tCONTAINER\tGPU\tUSED/SLICE MiB\tSM/CORES %\tKILLS")
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
}

// shortUUID keeps a UUID's "GPU-" and first 8 hex digits.
func shortUUID(uuid string) string {
	if len(uuid) > 12 {
		return uuid[:12]
	}
	return uuid
}

// renderRuntime lists what each node's runtime check found wrong: a
// runtime that does not fail closed without vgpud, or a setting to fix.
func renderRuntime(tw io.Writer, nodes []inspectv1.NodeView) {
	for _, n := range nodes {
		r := n.Runtime
		if r == nil || (r.Result == protocol.RuntimeFailsClosed && len(r.Problems) == 0) {
			continue
		}
		fmt.Fprintf(tw, "\nruntime on %s (%s): %s (vgpud preflight there says more)\n", n.Name, r.Runtime, strings.ToUpper(r.Result))
		for _, p := range r.Problems {
			fmt.Fprintf(tw, "  - %s\n", p)
		}
	}
}
