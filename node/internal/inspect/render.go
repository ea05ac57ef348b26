package inspect

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vgpud/vgpud/node/internal/preflight"
	"github.com/vgpud/vgpud/protocol/inspectv1"
)

// Render prints s as the tables `vgpud inspect` shows.
func Render(w io.Writer, s inspectv1.NodeSnapshot) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	ready := "ready"
	if !s.Ready {
		ready = "NOT READY: " + s.NotReady
	}
	leader := s.Leader
	switch {
	case s.IsLeader:
		leader += " (this replica)"
	case leader == "":
		leader = "unknown"
	}
	fmt.Fprintf(tw, "node\t%s\nbackend\t%s\nstate\t%s\nrole\t%s\nleader\t%s\n", s.Node, s.Backend, ready, s.Role, leader)
	switch s.Identity {
	case "runtime":
		fmt.Fprintf(tw, "identity\tthe runtime names each container's pod (NRI): %s\n", s.Runtime)
	case "":
	default:
		fmt.Fprintf(tw, "identity\tGUESSED: no NRI socket, so Allocate guesses which pod kubelet admits; one pod binds here at a time\n")
	}
	if c := s.RuntimeCheck; c != nil {
		fmt.Fprintf(tw, "runtime\t%s\n", preflight.Summary(preflight.Verdict{Result: c.Result, Runtime: c.Runtime, Config: c.Config, Scope: c.Scope, Files: c.Files, Problems: c.Problems}))
		for _, p := range c.Problems {
			fmt.Fprintf(tw, "\t- %s\n", p)
		}
		if c.CDI.Enabled {
			fmt.Fprintf(tw, "cdi\tthe runtime injects CDI devices from %s: a GPU the NVIDIA spec there names is handed out as its device too\n", strings.Join(c.CDI.SpecDirs, ", "))
		}
	}
	r := s.Registration
	switch {
	case s.DRA:
		fmt.Fprintf(tw, "kubelet\tserves DRA claims (driver gpu.vgpud.io), no device plugin\n")
	case r.Count == 0:
		fmt.Fprintf(tw, "kubelet\tnot registered yet%s\n", errSuffix(r.Error))
	default:
		// As of the snapshot, on the daemon's clock.
		fmt.Fprintf(tw, "kubelet\tregistered %d time(s), last %s ago (%s, %.1f ms)%s\n", r.Count, s.Taken.Sub(r.Last).Round(time.Second), r.Trigger, r.LatencyMs, errSuffix(r.Error))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "GPU\tUUID\tMODEL\tNUMA\tMEMORY MiB\tCORES %\tSLICES\tHEALTH")
	for _, g := range s.GPUs {
		health := "healthy"
		if !g.Healthy {
			health = "UNHEALTHY"
		}
		if g.Cordoned {
			health += ",cordoned"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d/%d\t%d/%d\t%d/%d\t%s\n", g.Index, short(g.UUID), g.Model, g.NUMA, g.MemoryUsedMiB, g.MemoryMiB, g.CoresUsed, g.Cores, g.SlicesUsed, g.Slices, health)
	}
	if s.CordonProblem != "" {
		fmt.Fprintf(tw, "cordon\t%s\n", s.CordonProblem)
	}
	fmt.Fprintln(tw)
	if len(s.Allocations) == 0 {
		fmt.Fprintln(tw, "no allocations")
	} else {
		fmt.Fprintln(tw, "POD\tCONTAINER\tGPU\tMiB\tCORES %\tPHASE")
		for _, a := range s.Allocations {
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%d\t%d\t%s\n", a.Namespace, a.Pod, a.Container, short(a.GPU), a.MemoryMiB, a.Cores, a.Phase)
		}
	}
	if s.DRA || len(s.Claims) > 0 {
		fmt.Fprintln(tw)
		if !s.DRA {
			fmt.Fprintln(tw, "DRA claims prepared while the node served claims, kept until their pods end:")
		}
		if len(s.Claims) == 0 {
			fmt.Fprintln(tw, "no DRA claims prepared")
		} else {
			fmt.Fprintln(tw, "CLAIM\tPODS\tDEVICE\tGPU\tMiB\tCORES %")
			for _, c := range s.Claims {
				fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%d\t%d\n", c.Namespace, c.Claim, strings.Join(c.Pods, ","), c.Device, short(c.GPU), c.MemoryMiB, c.Cores)
			}
		}
	}
	if s.Use != nil {
		renderUse(tw, s.Use)
	}
	return tw.Flush()
}

// short keeps a UUID's "GPU-" and first 8 hex digits, enough to tell a
// node's GPUs apart.
func short(uuid string) string {
	if len(uuid) > 12 {
		return uuid[:12]
	}
	return uuid
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return "; last error: " + e
}
