package clusterview

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Render prints v as the tables `vgpud inspect --cluster` shows.
func Render(w io.Writer, v View) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tGPU\tMODEL\tMEMORY MiB\tFREE MiB\tCORES %\tSLICES\tHEALTH\tPODS")
	for _, n := range v.Nodes {
		name := n.Name
		if n.Plugin != "" && n.Plugin != "serving" {
			name += " (" + n.Plugin + ")"
		}
		for _, g := range n.GPUs {
			health := "healthy"
			if !g.Healthy {
				health = "UNHEALTHY"
			}
			free := g.MemoryMiB - g.MemoryUsedMiB
			if g.Exclusive {
				free = 0
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d/%d\t%d\t%d/%d\t%d/%d\t%s\t%s\n", name, g.Index, g.Model, g.MemoryUsedMiB, g.MemoryMiB, free,
				g.CoresUsed, g.Cores, g.SlotsUsed, g.Slots, health, strings.Join(g.Pods, ", "))
		}
	}
	if len(v.Nodes) == 0 {
		fmt.Fprintln(tw, "no node has vgpud's inventory (vgpud.io/gpus)")
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "NAMESPACE\tGPUMEM MiB CHARGED\tLEFT\tGPUCORES CHARGED\tLEFT")
	for _, ns := range v.Namespaces {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\n", ns.Name, ns.MemoryUsedMiB, left(ns.MemoryLimit, ns.MemoryUsedMiB), ns.CoresUsed, left(ns.CoresLimit, int64(ns.CoresUsed)))
	}
	for _, p := range v.Problems {
		fmt.Fprintf(tw, "\nnot booked: %s", p)
	}
	if len(v.Problems) > 0 {
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// left is what a limit leaves, "-" without one.
func left(limit *int64, used int64) string {
	if limit == nil {
		return "-"
	}
	return fmt.Sprintf("%d of %d", *limit-used, *limit)
}
