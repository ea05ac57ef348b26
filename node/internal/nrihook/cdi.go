package nrihook

import (
	"slices"
	"strconv"
	"strings"
)

// cdiGrant is what the hook hands a container as CDI devices: their
// qualified names, and the device nodes they bring.
type cdiGrant struct{ names, nodes []string }

// cdiFor is d's grant as the node's CDI devices: none but for a Grant
// on a node that hands GPUs out so.
func cdiFor(d Decision, r Ruleset) (cdiGrant, error) {
	if d.Action == Grant && d.Claimed != nil {
		return *d.Claimed, nil
	}
	if d.Action != Grant || r.CDI == nil {
		return cdiGrant{}, nil
	}
	gpus := make([]string, 0, len(d.Assigned.GPUs))
	for _, g := range d.Assigned.GPUs {
		gpus = append(gpus, g.UUID)
	}
	names, nodes, err := r.CDI(gpus)
	return cdiGrant{names: names, nodes: nodes}, err
}

// others is a CDI device list (comma-separated) less the granted names.
func (g cdiGrant) others(list string) string {
	var out []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(g.names, n) {
			out = append(out, n)
		}
	}
	return strings.Join(out, ",")
}

// minors are the NVIDIA driver's device minors of the granted nodes, by
// the driver's names: /dev/nvidiaN is minor N, nvidiactl 255 and
// nvidia-modeset 254 (what a device rule for them names).
func (g cdiGrant) minors() []int64 {
	var out []int64
	for _, p := range g.nodes {
		switch rest, ok := strings.CutPrefix(p, "/dev/nvidia"); {
		case !ok:
		case rest == "ctl":
			out = append(out, 255)
		case rest == "-modeset":
			out = append(out, 254)
		default:
			if n, err := strconv.ParseInt(rest, 10, 64); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}
