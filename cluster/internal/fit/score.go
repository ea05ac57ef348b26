package fit

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/vgpud/vgpud/protocol/podmodel"
)

// Fullness is how full node n's GPU memory is now, in millionths: what is
// booked and what its GPUs hold beyond that (CommittedGPU.Held). Nodes
// are ranked by what they hold, not by what they would hold with the pod:
// the pod fills a small node by a larger share, and spread would then send
// a second pod to a big node before trying an idle small one.
func Fullness(n Node) int64 {
	var used, total int64
	for i := range n.GPUs { // not a copy of each: a MIG node lists 56
		total += n.GPUs[i].MemoryMiB
		used += n.GPUs[i].Used.MemMiB + n.GPUs[i].Held
	}
	if total == 0 {
		return 0
	}
	return min(used*1_000_000/total, 1_000_000)
}

// MaxScore is the top of the extender's score scale
// (k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority).
const MaxScore = 10

// Rank turns the fullness of each candidate node into an extender score
// 0..MaxScore: binpack gives the fullest 10 and the emptiest 0, spread the
// reverse, linearly between; equal nodes all score 10. Ranking among the
// candidates, not on a fixed scale, is what lets the policy decide: one
// pod moves a big node's fullness by less than a tenth, so on a fixed
// scale an idle node and one holding a few pods tie, and kube-scheduler's
// own scores, which favour emptier nodes, choose.
func Rank(fullness []int64, policy string) []int64 {
	return RankInto(nil, fullness, policy)
}

// RankInto is Rank writing into dst's storage when it is large enough.
func RankInto(dst, fullness []int64, policy string) []int64 {
	scores := slices.Grow(dst[:0], len(fullness))[:len(fullness)]
	if len(fullness) == 0 {
		return scores
	}
	lo, hi := slices.Min(fullness), slices.Max(fullness)
	for i, f := range fullness {
		if hi == lo {
			scores[i] = MaxScore
			continue
		}
		d := f - lo
		if policy == podmodel.Spread {
			d = hi - f
		}
		scores[i] = (d*MaxScore + (hi-lo)/2) / (hi - lo)
	}
	return scores
}

// Summarize turns per-node reasons into one line for a pod Event, e.g.
// "0/12 nodes fit: 9 insufficient gpumem (largest free 6000 MiB < 10000), 3 no matching gpu".
// Kinds are ordered by count, then name; the detail shown for a kind is
// that of its first node by name, so the line is deterministic.
func Summarize(total, fitting int, reasons map[string]Reason) string {
	type group struct {
		kind   string
		count  int
		detail string
	}
	names := make([]string, 0, len(reasons))
	for n := range reasons {
		names = append(names, n)
	}
	sort.Strings(names)
	byKind := map[string]*group{}
	var groups []*group
	for _, n := range names {
		r := reasons[n]
		g, ok := byKind[r.Kind]
		if !ok {
			g = &group{kind: r.Kind, detail: detailOf(r.Text)}
			byKind[r.Kind] = g
			groups = append(groups, g)
		}
		g.count++
	}
	sort.SliceStable(groups, func(a, b int) bool {
		if groups[a].count != groups[b].count {
			return groups[a].count > groups[b].count
		}
		return groups[a].kind < groups[b].kind
	})
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		s := fmt.Sprintf("%d %s", g.count, g.kind)
		if g.detail != "" {
			s += " (" + g.detail + ")"
		}
		parts = append(parts, s)
	}
	line := fmt.Sprintf("%d/%d nodes fit", fitting, total)
	if len(parts) > 0 {
		line += ": " + strings.Join(parts, ", ")
	}
	return line
}

// detailOf keeps the part of a reason after "; " — the numbers.
func detailOf(text string) string {
	if _, after, ok := strings.Cut(text, "; "); ok {
		return after
	}
	return ""
}
